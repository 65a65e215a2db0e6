"""手算例子"春天 → 来"的数据流图：每个方框写着从真实模型截下的中间值（"天"那个位置）。"""
from __future__ import annotations

from ..walkthrough import VOCAB, fmt


def walkthrough_boxes(trace: dict) -> list[tuple[str, str]]:
    """数据流上的方框 (标题, 数值)，依次排列；数值来自 :func:`gptcourse.walkthrough.run`。"""
    t, i = trace, 1                                                  # i = "天"的位置
    return [
        ("输入 春天", "ids [0, 1]"),
        ("词嵌入 + 位置", f"X[天] = {fmt(t['X'][i])}"),
        ("层归一化 1", fmt(t["LN1"][i])),
        ("注意力（天）", "分数 ÷√2：" + "、".join(
            f"{VOCAB[j]} {t['scores'][i][j].item():.2f}".replace("-", "−") for j in range(i + 1))
         + "\n权重：" + "、".join(f"{VOCAB[j]} {t['attn_weights'][i][j].item():.4f}"
                               for j in range(i + 1))
         + f"\n输出 {fmt(t['attn_out'][i])}"),
        ("＋ 残差 1", fmt(t["resid1"][i])),
        ("层归一化 2", fmt(t["LN2"][i])),
        ("MLP：GELU", fmt(t["hidden_post"][i][:2])),
        ("＋ 残差 2", fmt(t["resid2"][i])),
        ("最终层归一化", fmt(t["LNf"][i])),
        ("输出头（共享 E）", f"logits {fmt(t['logits'])}"),
        ("softmax", "、".join(f"{VOCAB[j]} {p:.4f}" for j, p in enumerate(t["probs"].tolist()[:2]))
         + "\n" + "、".join(f"{VOCAB[j]} {p:.4f}" for j, p in enumerate(t["probs"].tolist())
                          if j >= 2)),
        ("贪心解码", f"下一个字：{t['greedy_char']}"),
    ]


def plot_walkthrough(trace: dict):
    """数据流图：蛇形两行方框（第二行从右往左），虚线 = 残差连接；右侧是下一个字的概率。

    返回 Figure。
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    boxes = walkthrough_boxes(trace)
    per_row = 6
    w, h, gx, gy = 2.0, 1.15, 0.45, 0.9
    fig = plt.figure(figsize=(15, 5.2))
    ax = fig.add_axes([0.0, 0.0, 0.76, 1.0])
    axb = fig.add_axes([0.80, 0.2, 0.18, 0.6])
    pos = []
    for k, (name, val) in enumerate(boxes):
        r, c = divmod(k, per_row)
        if r % 2:                                                     # 蛇形：奇数行从右往左
            c = per_row - 1 - c
        x, y = c * (w + gx), -r * (h + gy)
        pos.append((x, y))
        face = "#f4a261" if k == len(boxes) - 1 else ("#cfe2ff" if "注意力" in name else
                                                      "#d8f3dc" if "MLP" in name else "#e9ecef")
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.03,rounding_size=0.1",
                                    facecolor=face, edgecolor="#6c757d", lw=1.2))
        ax.text(x + w / 2, y + h - 0.25, name, ha="center", va="center", fontsize=11)
        longest = max(len(part) for part in val.splitlines())
        lines = len(val.splitlines())
        ax.text(x + w / 2, y + (0.36 if lines > 2 else 0.4), val, ha="center", va="center",
                linespacing=1.3 if lines > 2 else 1.4,
                fontsize=8.5 if longest <= 26 and lines <= 2 else 7.3)
    arrow = dict(arrowstyle="-|>", mutation_scale=14, color="#495057", lw=1.3)
    for k in range(len(boxes) - 1):
        (x0, y0), (x1, y1) = pos[k], pos[k + 1]
        if y0 == y1:
            a, b = ((x0 + w, y0 + h / 2), (x1, y1 + h / 2)) if x1 > x0 else \
                   ((x0, y0 + h / 2), (x1 + w, y1 + h / 2))
        else:                                                         # 换行：竖直向下
            a, b = (x0 + w * 0.7, y0), (x1 + w * 0.7, y1 + h)
        ax.add_patch(FancyArrowPatch(a, b, **arrow))
    resid = dict(linestyle="--", arrowstyle="-|>", mutation_scale=12, color="#2a9d8f", lw=1.4)
    (xa, ya), (xb, yb) = pos[1], pos[4]                               # 残差 1：绕过 LN1 与注意力
    ax.add_patch(FancyArrowPatch((xa + w / 2, ya + h), (xb + w / 2, yb + h),
                                 connectionstyle="arc3,rad=-0.22", **resid))
    (xa, ya), (xb, yb) = pos[4], pos[7]                               # 残差 2：绕过 LN2 与 MLP
    ax.add_patch(FancyArrowPatch((xa + w * 0.3, ya), (xb + w * 0.3, yb + h), **resid))
    rows = (len(boxes) + per_row - 1) // per_row
    bottom = -(rows - 1) * (h + gy)
    ax.text(0, bottom - 0.45, "虚线 = 残差连接（直接相加）。方框里是“天”那个位置的向量，"
            "全部用前向钩子从真实的 GPT 模型中截取；权重是手工设定的，不是训练得到的。",
            fontsize=9.5, color="#2a9d8f")
    ax.set_xlim(-0.2, per_row * (w + gx))
    ax.set_ylim(bottom - 0.8, h + 1.1)
    ax.set_aspect("equal")
    ax.axis("off")
    probs = trace["probs"].tolist()
    colors = ["#f4a261" if j == trace["greedy_id"] else "#adb5bd" for j in range(len(probs))]
    axb.bar(list(VOCAB), probs, color=colors)
    for j, p in enumerate(probs):
        axb.text(j, p + 0.02, f"{p:.4f}", ha="center", fontsize=8.5)
    axb.set_ylim(0, 1)
    axb.set_title("“春天”之后的下一个字")
    axb.set_ylabel("概率")
    return fig
