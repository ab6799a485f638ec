from gapscope.cli import main

main()
