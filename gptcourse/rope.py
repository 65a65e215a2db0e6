"""旋转位置编码（RoPE）：把 Q、K 的每一对维度按"位置 × 频率"的角度旋转。

第 i 对维度的频率 θ_i = base^(-2i/D)，位置 m 处旋转角度 m·θ_i。
旋转后 q_m·k_n 只取决于相对距离 m−n。V 从不旋转。

本课程的代码用 "rotate-half" 配对：第 i 维与第 i + D/2 维组成一对（LLaMA/HF 的写法）；
另一种 "interleaved" 配对是 (2i, 2i+1)。两者只差一个固定的维度排列，注意力分数完全相同。
"""
from __future__ import annotations

import torch

from .errors import UserError


def rope_angles(head_dim: int, n_pos: int, base: float = 10000.0) -> torch.Tensor:
    """角度表 [n_pos, head_dim/2]：第 m 行第 i 列是 m·θ_i。"""
    if head_dim % 2:
        raise UserError(f"RoPE 需要偶数维度，收到 {head_dim}")
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # [D/2]
    pos = torch.arange(n_pos, dtype=torch.float64)                                     # [P]
    return torch.outer(pos, inv_freq).float()                                          # [P, D/2]


def rotate_pair(x1, x2, cos, sin):
    """把 (x1, x2) 逆时针旋转角度 a（给出 cos a、sin a）→ (y1, y2)；数和张量都可以（逐元素）。"""
    return x1 * cos - x2 * sin, x1 * sin + x2 * cos


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """rotate-half 写法。x: [..., T, D]；cos/sin: [T, D/2]。返回同形状。"""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]                     # 各 [..., T, D/2]
    return torch.cat(rotate_pair(x1, x2, cos, sin), dim=-1)


def apply_rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """interleaved 写法：第 (2i, 2i+1) 维成对旋转。形状同 :func:`apply_rope`。"""
    x1, x2 = x[..., 0::2], x[..., 1::2]                       # 各 [..., T, D/2]
    out = torch.stack(rotate_pair(x1, x2, cos, sin), dim=-1)  # [..., T, D/2, 2]
    return out.flatten(-2)


def interleaved_to_half(x: torch.Tensor) -> torch.Tensor:
    """把 interleaved 排列的最后一维重排成 rotate-half 排列（那个"固定的维度排列"）。"""
    return torch.cat([x[..., 0::2], x[..., 1::2]], dim=-1)
