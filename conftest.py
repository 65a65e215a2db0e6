"""pytest 的全局设置（仓库根目录）：``pytest``、``pytest tests``、``pytest notebooks`` 都会先读它。

- 在导入时设置 GPTCOURSE_QUICK=1：之后由 nbval 启动的笔记本内核会继承这个环境变量，
  所以笔记本总以快速模式执行——不论只跑 notebooks/ 还是连同 tests/ 一起跑。
- 画图使用无界面的 Agg 后端。
"""
from __future__ import annotations

import os

os.environ["GPTCOURSE_QUICK"] = "1"
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # 避免调试器在内核启动时的警告

import matplotlib  # noqa: E402

matplotlib.use("Agg")
