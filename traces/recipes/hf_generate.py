"""A Hugging Face model's own generate(), eager and then under torch.compile, in NVTX ranges.

Recorded under nsys to make hf_generate_compile.sqlite (traces/recipes/record_wave2.sh). A small
random-init Llama (no download: LlamaConfig + LlamaForCausalLM), bf16, batch 1, a random prompt,
greedy decoding with a static KV cache (cache_implementation="static", so the compiled forward
sees the same shapes every token and compiles a bounded number of times), EOS disabled so every
call makes exactly --max-new-tokens tokens. generate()'s own automatic compilation is switched
off (disable_compile=True): the compiled phase is the user's `model.forward = torch.compile(...)`.

Ranges (torch.cuda.nvtx push/pop, main thread), after an untraced-by-range warm-up generate():
  generate_eager      one generate() on the plain model
  compile_warmup      model.forward = torch.compile(model.forward) (default mode), then the first
                      generate(), which compiles: seconds of host time with no CUDA work
  generate_compiled   --compiled-calls later generate() calls (default 2)

    nsys profile -t cuda,nvtx --cuda-graph-trace=node --sample=none --cpuctxsw=none \
        --export sqlite -o hf_generate_compile python3 traces/recipes/hf_generate.py
"""

from __future__ import annotations

import argparse
import time

import torch

from wave2_util import Ranges, add_device_arg, sync, torch_device


def compile_counts() -> str:
    from torch._dynamo.utils import counters

    stats = counters["stats"]
    return (f"dynamo frames compiled {stats.get('unique_graphs', 0)}, "
            f"calls captured {stats.get('calls_captured', 0)}, "
            f"recompiles {sum(counters['recompiles'].values()) if 'recompiles' in counters else 0}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_device_arg(ap)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--prompt-len", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--compiled-calls", type=int, default=2)
    ap.add_argument("--cache", choices=("static", "dynamic"), default="static",
                    help="cache_implementation for every generate() call")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode for model.forward (default: 'default')")
    ap.add_argument("--no-pointwise-autotune", action="store_true",
                    help="torch._inductor.config.triton.autotune_pointwise = False: one config per "
                         "Triton kernel, no benchmark launches at the first call (a smaller trace)")
    args = ap.parse_args()

    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    dev = torch_device(args.device)
    dtype = torch.bfloat16
    torch.manual_seed(0)
    torch._logging.set_logs(recompiles=True)  # why any recompile happened, on stderr
    if args.no_pointwise_autotune:
        import torch._inductor.config as inductor_config

        inductor_config.triton.autotune_pointwise = False
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.heads, max_position_embeddings=256,
        bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(config).to(dev, dtype).eval()
    model.generation_config.eos_token_id = None  # never stop early: every call is N tokens
    model.generation_config.pad_token_id = 0
    prompt = torch.randint(3, args.vocab, (1, args.prompt_len), device=dev)
    mask = torch.ones_like(prompt)
    gen = dict(attention_mask=mask, do_sample=False, disable_compile=True)
    if args.cache == "static":
        gen["cache_implementation"] = "static"
    rng = Ranges.for_torch(dev)

    def generate(n: int) -> torch.Tensor:
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=n, **gen)
        sync(dev)
        return out

    t0 = time.perf_counter()
    generate(2)  # warm-up: cuBLAS, allocator, generate()'s own first-call work; no range
    t_warm = time.perf_counter() - t0

    with rng.range("generate_eager"):
        t0 = time.perf_counter()
        out_eager = generate(args.max_new_tokens)
        t_eager = time.perf_counter() - t0

    with rng.range("compile_warmup"):
        t0 = time.perf_counter()
        model.forward = torch.compile(model.forward, mode=args.compile_mode)
        out_first = generate(args.max_new_tokens)
        t_compile = time.perf_counter() - t0
    after_first = compile_counts()

    t_compiled = []
    for _ in range(args.compiled_calls):
        with rng.range("generate_compiled"):
            t0 = time.perf_counter()
            out = generate(args.max_new_tokens)
            t_compiled.append(time.perf_counter() - t0)

    new = out.shape[1] - args.prompt_len
    same = torch.equal(out, out_first)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name(0) if dev.type == 'cuda' else 'cpu'}, "
          f"llama layers {args.layers} hidden {args.hidden} heads {args.heads} vocab {args.vocab}, "
          f"prompt {args.prompt_len}, new tokens {new} (asked {args.max_new_tokens}), "
          f"cache {args.cache}, compile mode {args.compile_mode}")
    print(f"host seconds: warm-up {t_warm:.2f}, eager {t_eager:.3f}, compile+first {t_compile:.2f}, "
          f"compiled {', '.join(f'{t:.3f}' for t in t_compiled)}")
    print(f"after the first compiled call: {after_first}; at exit: {compile_counts()}")
    print(f"compiled output equals the first compiled call's: {same}; "
          f"first compiled vs eager tokens equal: {torch.equal(out_first, out_eager)}")
    print(rng.summary())
    try:  # end inductor's compile workers here, not in nsys's wait for the process tree
        from torch._inductor.async_compile import shutdown_compile_workers

        shutdown_compile_workers()
    except Exception as exc:  # noqa: BLE001 - best effort
        print("shutdown_compile_workers:", exc)


if __name__ == "__main__":
    main()
