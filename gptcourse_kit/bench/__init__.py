"""速度基准：``python -m gptcourse_kit.bench [--quick] [--json 路径]``。

每个基准模块（``training``，以及存在时的 ``generation``）提供 ``run(quick=False) -> dict``：
在同一次运行里并排测量、打印表格，并返回可以写成 JSON 的数字。测试套件从不计时。
``target``（训练到目标损失要多久，约半小时）不在默认的一轮里，用 ``--only target`` 单独跑。
"""
BENCHMARKS = ("training", "generation")
OPTIONAL = ("target",)
_LAZY = (*BENCHMARKS, *OPTIONAL, "peer", "report", "server")


def __getattr__(name: str):
    # gc.bench.training 这样的子模块在第一次访问时才导入（导入它们会建模型、读语料）
    if name in _LAZY:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
