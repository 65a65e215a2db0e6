"""同一个训练入口在 torchrun 下跑 2 个 CPU 进程（gloo）：各进程取不同批次，最后权重完全相同。"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch

from gptcourse import checkpoint

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not torch.distributed.is_available() or
                    not torch.distributed.is_gloo_available(), reason="没有 gloo 后端")
def test_two_ranks_end_with_identical_weights(tmp_path):
    out, dump = tmp_path / "ckpt" / "ddp.pt", tmp_path / "ranks"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "gptcourse", "train", "--corpus", "tang_5jue", "--preset", "mini",
           "--steps", "4", "--batch-size", "4", "--block-size", "32", "--warmup", "1",
           "--eval-interval", "2", "--no-bf16", "--no-progress", "--out", str(out),
           "--dump-rank-state", str(dump)]
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    ranks = [json.loads((dump / f"rank{i}.json").read_text()) for i in (0, 1)]
    assert [s["world_size"] for s in ranks] == [2, 2]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]    # 梯度已在各进程间平均
    assert len(ranks[0]["losses"]) == len(ranks[1]["losses"]) == 4
    assert ranks[0]["losses"] != ranks[1]["losses"]                    # 各进程看到的是不同批次
    assert r.stdout.count("训练完成") == 1                             # 只有 0 号进程打印总结
    assert sorted(p.name for p in out.parent.iterdir()) == ["ddp.best.pt", "ddp.last.pt",
                                                           "ddp.pt"]
    model, _, meta = checkpoint.load(out.with_suffix(".last.pt"))
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.contiguous().numpy().tobytes())
    assert h.hexdigest() == ranks[0]["weights_sha256"]                 # 存下的就是各进程共同的权重
    assert meta["world_size"] == 2 and meta["step"] == 4
    assert meta["command"].startswith("torchrun --nproc_per_node=2 -m gptcourse train")
    summary = json.loads(r.stdout.split("训练完成：", 1)[1].splitlines()[0])
    assert summary["tokens"] == 4 * 4 * 32 * 2                         # 两个进程的词元都算上
