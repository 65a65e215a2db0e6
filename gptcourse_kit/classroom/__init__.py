"""课堂工具：学生版笔记本、全班自动评分、把课程渲染成静态网站。

命令都是 ``python -m gptcourse_kit.classroom <子命令>``::

    student --out DIR            # 教师版 → 学生版（去掉答案与输出）
    student --out DIR --bundle   # 另写 DIR/学生版.zip（发给学生）
    grade NB... [--csv F] [--jobs N] [--weights F] [--feedback DIR]   # 全班自动评分
    site --out DIR               # 五个笔记本（含提交的输出）→ 静态网站
    slides --out DIR             # 投影用的幻灯片（默认学生版）
    handout --out DIR            # 答案讲义（教师用）
    times [NB...] [--json F]     # 快速模式下每节的用时

练习的标记沿用 nbgrader 的格式（答案夹在 ``### BEGIN SOLUTION`` / ``### END SOLUTION`` 之间，
单元格元数据 ``nbgrader.solution`` / ``nbgrader.grade``），所以同一批教师版笔记本也能交给
nbgrader（``generate_assignment`` 时把存根设成以“还没完成”开头，见 docs/teaching_guide.md）：
nbgrader 运行时检查器进入严格模式，没做完或做错就抛出 AssertionError。评分本身用
``gptcourse.check`` 的检查器，在沙箱里由裁判进程调用（见 ``grade.py``）。
"""
