"""速度基准：``python -m gptcourse.bench [--quick] [--json 路径]``。

每个基准模块（``training``，以及存在时的 ``generation``）提供 ``run(quick=False) -> dict``：
在同一次运行里并排测量、打印表格，并返回可以写成 JSON 的数字。测试套件从不计时。
"""
BENCHMARKS = ("training", "generation")
