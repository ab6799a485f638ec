"""Data flows one way (docs/architecture.md): the library never imports the command line. Every
module of the package outside gapscope/cli/ (and ``gapscope/__main__.py``, which starts it) is
read as source, and each import it makes, at the top or inside a function, is listed."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gapscope"


def _imports(path: Path) -> list[str]:
    """Every module an ``import`` or ``from ... import`` of the file names (``from gapscope
    import cli`` names ``gapscope.cli``)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return names


def test_the_library_never_imports_the_command_line():
    library = [p for p in PACKAGE.rglob("*.py")
               if "cli" not in p.relative_to(PACKAGE).parts and p.name != "__main__.py"]
    assert len(library) > 80  # the whole package, not an empty glob
    found = {str(p.relative_to(PACKAGE)): name for p in library for name in _imports(p)
             if name == "gapscope.cli" or name.startswith("gapscope.cli.")}
    assert found == {}


def test_the_import_lister_sees_imports_inside_functions(tmp_path):
    """The lister itself, on SYNTHETIC source: an import inside a function counts."""
    source = tmp_path / "m.py"
    source.write_text("import os\n\ndef f():\n    from gapscope.cli.output import output_file\n"
                      "    from gapscope import cli\n", encoding="utf-8")
    assert _imports(source) == ["os", "gapscope.cli.output", "gapscope.cli.output.output_file",
                                "gapscope", "gapscope.cli"]


def test_the_reference_imports_nothing_of_gapscope():
    """tests/reference.py recomputes every figure on its own: it reads the traces with the
    standard library and pyarrow and spells out the CUDA calls by role itself, so a wrong entry
    in gapscope's lists shows as a difference instead of being shared."""
    reference = Path(__file__).resolve().parent / "reference.py"
    assert [name for name in _imports(reference) if name.split(".")[0] == "gapscope"] == []
