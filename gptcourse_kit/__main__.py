"""``python -m gptcourse_kit``：包本身不是命令；一行说出有哪些命令，退出码 2。"""
import sys

TOOLS = ("classroom", "claims", "notebooks", "bench")

print("错误：gptcourse_kit 是工具包，不是命令；请运行其中一个："
      + "、".join(f"python -m gptcourse_kit.{t}" for t in TOOLS), file=sys.stderr)
sys.exit(2)
