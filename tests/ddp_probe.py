"""`tsformer train` under torchrun, recording what this rank trained on (for tests/test_distributed.py).

    torchrun --standalone --nproc_per_node 2 tests/ddp_probe.py DUMP_DIR train CSV --out RUN ...

Writes DUMP_DIR/rank<RANK>.pt: {"contexts": every training context this rank saw, in step order,
(N, context_len, C); "batches": how many of them each step took; "losses": each step's loss; "state": the
model's state_dict after the last step; "exit_code": the CLI's}.
Only the library's own `Forecaster.forward` is wrapped; nothing in tsformer knows about this script.

PROBE_STOP_AT_STEP=n raises KeyboardInterrupt (what Ctrl-C raises) at this rank's n-th training step;
the script still exits 0, so torchrun does not kill the other rank while it cleans up.
PROBE_NO_DDP=1 trains each rank without the DDP wrapper (no gradient all-reduce), to show that the
test's check of identical parameters can fail.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from tsformer import distributed
from tsformer.cli import app
from tsformer.model import Forecaster


def main() -> None:
    dump_dir, argv = Path(sys.argv[1]), sys.argv[2:]
    stop_at = int(os.environ.get("PROBE_STOP_AT_STEP", "0"))
    seen: dict = {"contexts": [], "model": None, "losses": []}
    forward = Forecaster.forward

    def recording_forward(self, x, observed=None, target=None, **kwargs):
        if target is not None:  # a training step: validation and the leakage checks pass no target
            seen["contexts"].append(x.detach().cpu().clone())
            seen["model"] = self
            if len(seen["contexts"]) == stop_at:
                raise KeyboardInterrupt
        out = forward(self, x, observed, target, **kwargs)
        if target is not None:
            seen["losses"].append(float(out[1]))
        return out

    Forecaster.forward = recording_forward
    if os.environ.get("PROBE_NO_DDP"):
        distributed.wrap = lambda model, ctx: model
    try:
        app(argv, prog_name="tsformer")
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    model = seen["model"]
    torch.save(
        {
            "contexts": torch.cat(seen["contexts"]) if seen["contexts"] else torch.empty(0),
            "batches": [len(c) for c in seen["contexts"]],  # each training step's windows on this rank
            "losses": seen["losses"],  # each training step's loss on this rank
            "state": {k: v.detach().cpu().clone() for k, v in model.state_dict().items()} if model else {},
            "exit_code": code,
        },
        dump_dir / f"rank{os.environ['RANK']}.pt",
    )


if __name__ == "__main__":
    main()
