"""KV 缓存的一个慢写法：每一步用 ``torch.cat`` 把新的 K、V 拼到旧缓存后面。

结果和预先分配的 :class:`gptcourse.model.KVCache` 完全一样，只是每一步都把整块旧缓存复制一遍，
生成得越长越慢（笔记本 05 §7 把三种做法并排测速；速度基准 ``bench.generation`` 也用它作参照）。
"""
from __future__ import annotations

import torch

from ..config import preset
from ..model import GPT, KVCache


def bench_model(vocab_size: int = 6436, block_size: int = 640, seed: int = 0) -> GPT:
    """测速用的 course 预设模型（随机权重，eval 模式）：窗口够长，缓存的差别才看得出来。"""
    torch.manual_seed(seed)
    return GPT(preset("course", vocab_size=vocab_size, block_size=block_size)).eval()


class CatCache(KVCache):
    """旧式缓存：每一步用 ``torch.cat`` 把新的 K、V 拼到旧缓存后面（整块复制一遍）。"""

    def write(self, layer, start, k, v):
        if layer == len(self.k):                  # 这一层的第一次写入
            self.k.append(k)
            self.v.append(v)
        else:                                     # k, v: [B, H, 新增, D] 接在 [B, H, 已有, D] 后面
            self.k[layer] = torch.cat([self.k[layer], k], dim=2)
            self.v[layer] = torch.cat([self.v[layer], v], dim=2)
        return self.k[layer], self.v[layer]
