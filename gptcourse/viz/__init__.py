"""课程里所有的图：中文字体、通用热力图、课程流程图。

核心模块（数据、模型、训练……）从不导入 viz；viz 只负责画图。
其他章节的绘图模块在下面逐行追加导入（每个模块一行，显式导入）。
"""
from . import (  # 笔记本 02：掩码、头的分析、RoPE、春天→来
    attention,
    evaluation,  # 笔记本 04：模型与基线对比、诗内逐位置损失
    generation,  # 笔记本 05：温度、下一个字的分布、生成速度
    heads,
    live,  # 笔记本 02、05：JupyterLab 里的实时演示（需要 ipywidgets，用时才导入）
    rope,
    training,  # 笔记本 03：学习率、损失曲线、梯度范数、消融
    walkthrough,
)
from .basic import PIPELINE_STAGES, pipeline_figure, show_heatmap
from .fonts import FONT_FAMILY, configure_matplotlib, register_font
