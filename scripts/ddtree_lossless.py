"""DDTree decoding on a real causal LM, built on the ddtree patch set's ddtree_utils.py: lossless at temperature 0?

The target is a Llama model made from a config with random weights (nothing downloaded); the draft is a
second model, the target's weights plus noise, which rolls out `depth` positions greedily and proposes
each position's top-k with log-probs (what a DFlash draft gives DDTree). Each round builds one tree with
`build_draft_tree`, verifies it in ONE target forward over the prefix and the tree (the ancestor-only
`tree_attention_mask`, the `tree_positions`), commits the accepted path with `accept_longest_path`, and
carries the bonus token. The tokens are compared, token for token, with the target's own greedy decoding.

Prints one JSON document (and writes it to --json): per budget the mismatching prompts and the mean
accepted length (committed tokens per round: accepted draft tokens + the bonus). `--mask causal` or
`--positions linear` verify with a broken mask or positions, to show the check catches them (`--broken N`
does both after the check, on N prompts at the largest budget, in the same process).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any


def load_utils(path: Path) -> ModuleType:
    """The patch set's ddtree_utils.py, loaded by path (sglang's package __init__ needs a GPU stack)."""
    spec = importlib.util.spec_from_file_location("ddtree_utils", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def make_models(args: argparse.Namespace) -> tuple[Any, Any]:
    """The target (random weights from a config) and the draft (its weights plus noise)."""
    import copy

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 2,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=max(1, args.heads // 2),
        max_position_embeddings=4096,
        initializer_range=args.init,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "eager"  # an additive float mask, the same in every transformers release
    dtype = getattr(torch, args.dtype)
    target = LlamaForCausalLM(config).to(device=args.device, dtype=dtype).eval()
    draft = copy.deepcopy(target)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * p.std() * args.noise)
    return target, draft


def greedy(model: Any, prompt: list[int], n: int, device: str) -> tuple[list[int], list[Any]]:
    """n greedy tokens after prompt with a KV cache, and the log-probs at each step."""
    import torch

    out: list[int] = []
    logps: list[Any] = []
    ids = torch.tensor([prompt], device=device)
    cache = None
    with torch.no_grad():
        for _ in range(n):
            res = model(input_ids=ids, past_key_values=cache, use_cache=True)
            cache = res.past_key_values
            logits = res.logits[0, -1]
            logps.append(torch.log_softmax(logits.double(), -1))
            token = int(logits.argmax())
            out.append(token)
            ids = torch.tensor([[token]], device=device)
    return out, logps


def verify_mask(
    utils: ModuleType, parents: list[int], prefix: int, kind: str, dtype: Any, device: str
) -> Any:
    """The additive [1, 1, Q, Q] mask of one verify forward: prefix causal, tree rows see the whole prefix and
    (kind "tree") their ancestors only, or (kind "causal", broken on purpose) every earlier tree node."""
    import torch

    n = len(parents)
    total = prefix + n
    allowed = torch.tril(torch.ones(total, total, dtype=torch.bool, device=device))
    if kind == "tree":
        allowed[prefix:, prefix:] = utils.tree_attention_mask_tensor(parents, device=device)
    mask = torch.zeros(total, total, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def ddtree_decode(
    utils: ModuleType,
    target: Any,
    draft: Any,
    prompt: list[int],
    n: int,
    budget: int,
    args: argparse.Namespace,
) -> tuple[list[int], int, int]:
    """n tokens by DDTree rounds; returns them, the number of rounds and of accepted draft tokens."""
    import torch

    seq = list(prompt)
    rounds = accepted_total = 0
    while len(seq) - len(prompt) < n:
        # The draft's per-position distributions for the next `depth` positions.
        _, logps = greedy(draft, seq, args.depth, args.device)
        top = [lp.topk(args.topk) for lp in logps]
        ids = [t.indices.tolist() for t in top]
        scores = [t.values.tolist() for t in top]
        tree = utils.build_draft_tree(ids, scores, budget, root_token=seq[-1])
        # One target forward: the prefix without its last token, then the tree (its root is that token).
        prefix = len(seq) - 1
        positions = list(range(prefix)) + (
            utils.tree_positions(tree.depths, len(seq))
            if args.positions == "tree"
            else list(range(prefix, prefix + len(tree)))
        )
        input_ids = torch.tensor([seq[:-1] + tree.tokens], device=args.device)
        mask = verify_mask(utils, tree.parents, prefix, args.mask, target.dtype, args.device)
        with torch.no_grad():
            logits = target(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=torch.tensor([positions], device=args.device),
            ).logits[0, prefix:]
        accepted, bonus = utils.accept_longest_path(tree, logits.argmax(-1))
        path = [0] + accepted
        assert any(row[: len(path)] == path for row in utils.retrieve_indices(tree.parents)), (
            "path not in the tree"
        )
        seq += [tree.tokens[i] for i in accepted] + [bonus]
        rounds += 1
        accepted_total += len(accepted)
    return seq[len(prompt) : len(prompt) + n], rounds, accepted_total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--utils", type=Path, required=True, help="ddtree_utils.py as the patch set made it")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument(
        "--init", type=float, default=0.5, help="initializer_range: large keeps greedy text varied"
    )
    parser.add_argument(
        "--noise", type=float, default=0.3, help="the draft's weight noise, relative to each tensor's std"
    )
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--budgets", default="1,4,16")
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--topk", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mask", choices=("tree", "causal"), default="tree")
    parser.add_argument("--positions", choices=("tree", "linear"), default="tree")
    parser.add_argument(
        "--deadline", type=float, default=0, help="start no new prompt after this many seconds of decoding"
    )
    parser.add_argument(
        "--broken",
        type=int,
        default=0,
        help="also decode this many prompts at the largest budget with a broken mask, then positions",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import os

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.device == "cpu":
        torch.set_num_threads(1)  # small matrices: one thread is many times faster than several contending
    if args.device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    utils = load_utils(args.utils)
    started = time.perf_counter()
    target, draft = make_models(args)
    gen = torch.Generator().manual_seed(args.seed + 1)
    prompts = [
        torch.randint(0, args.vocab, (args.prompt_len,), generator=gen).tolist() for _ in range(args.prompts)
    ]
    references: list[list[int]] = []
    budgets = [int(b) for b in args.budgets.split(",")]
    stats = {
        b: {"mismatched": [], "rounds": 0, "accepted": 0, "seconds": 0.0, "first": None} for b in budgets
    }
    done, decoding = 0, time.perf_counter()
    for i, prompt in enumerate(prompts):
        if args.deadline and time.perf_counter() - decoding > args.deadline:
            break  # every budget has run the same prompts
        reference = greedy(target, prompt, args.new_tokens, args.device)[0]
        references.append(reference)
        for budget in budgets:
            t0 = time.perf_counter()
            tokens, rounds, accepted = ddtree_decode(
                utils, target, draft, prompt, args.new_tokens, budget, args
            )
            row = stats[budget]
            row["rounds"] += rounds
            row["accepted"] += accepted
            row["seconds"] += time.perf_counter() - t0
            if tokens != reference:
                row["mismatched"].append(i)
                if row["first"] is None:
                    row["first"] = {
                        "prompt": i,
                        "at": next(j for j, (x, y) in enumerate(zip(tokens, reference)) if x != y),
                    }
        done += 1
    rows = [
        {
            "budget": b,
            "prompts": done,
            "mismatched": len(r["mismatched"]),
            "first_mismatch": r["first"],
            "rounds": r["rounds"],
            "mean_accepted_length": round((r["accepted"] + r["rounds"]) / max(1, r["rounds"]), 3),
            "mean_accepted_draft_tokens": round(r["accepted"] / max(1, r["rounds"]), 3),
            "seconds": round(r["seconds"], 2),
        }
        for b, r in stats.items()
    ]
    broken = {}
    if args.broken and done:
        # The same decoding with a broken verify forward must be caught: siblings visible to each other
        # (a causal mask over the flattened tree), or nodes placed by index instead of depth.
        for key, change in (
            ("causal_mask", {"mask": "causal"}),
            ("linear_positions", {"positions": "linear"}),
        ):
            bad = argparse.Namespace(**{**vars(args), **change})
            pairs = list(zip(prompts, references))[: args.broken]
            broken[key] = sum(
                ddtree_decode(utils, target, draft, p, args.new_tokens, max(budgets), bad)[0] != ref
                for p, ref in pairs
            )
    distinct = len({t for ref in references for t in ref})
    doc = {
        "lossless": done > 0 and all(r["mismatched"] == 0 for r in rows),
        "rows": rows,
        "broken_mismatched": broken,
        "model": {
            "vocab": args.vocab,
            "hidden": args.hidden,
            "layers": args.layers,
            "heads": args.heads,
            "dtype": args.dtype,
            "device": args.device,
            "parameters": sum(p.numel() for p in target.parameters()),
        },
        "draft": {"noise": args.noise, "depth": args.depth, "topk": args.topk},
        "prompts": done,
        "prompt_len": args.prompt_len,
        "new_tokens": args.new_tokens,
        "distinct_reference_tokens": distinct,
        "mask": args.mask,
        "positions": args.positions,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "seconds": round(time.perf_counter() - started, 2),
    }
    text = json.dumps(doc, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
