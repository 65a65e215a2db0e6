"""pytest 的全局设置（仓库根目录）：``pytest``、``pytest tests``、``pytest notebooks`` 都会先读它。

- 在导入时设置 GPTCOURSE_QUICK=1：之后由 nbval 启动的笔记本内核会继承这个环境变量，
  所以笔记本总以快速模式执行——不论只跑 notebooks/ 还是连同 tests/ 一起跑。
- 画图使用无界面的 Agg 后端。
- 用 pytest-xdist 并行时（pyproject 里的 ``-n 2``），每个工作进程只分到 CPU 核数 / 进程数个线程
  （``OMP_NUM_THREADS``，它启动的笔记本内核与子进程也继承）：两个进程各开满核数的线程会互相抢核，
  PyTorch 的线程在抢不到核时空转，整套测试反而更慢。已经设置了这个变量时不改。
"""
from __future__ import annotations

import os

os.environ["GPTCOURSE_QUICK"] = "1"
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # 避免调试器在内核启动时的警告
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:      # xdist 在读 conftest 之前设置
    _threads = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    os.environ.setdefault("OMP_NUM_THREADS", _threads)
    os.environ.setdefault("MKL_NUM_THREADS", _threads)

import matplotlib  # noqa: E402

matplotlib.use("Agg")
