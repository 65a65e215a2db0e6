"""发布设置：一次发布认证的是“模型 + 解码设置”，设置存在检查点的 meta["release"] 里。

``choose`` 在一组种子（``TUNE_SEEDS``）上对每组候选设置采样、过一遍验收表
（:mod:`gptcourse.acceptance`），从全部通过的设置里挑模型自己最“情愿”写的那组（诗的平均负对数
似然最低，即最流畅的），再在一个谁都没看过的种子块上确认一遍（见下）。
``generate`` / ``serve`` / ``eval`` 的命令行默认用这组设置（:func:`settings`）。

**样本外的验收**：挑选时看过的种子上的验收表是"样本内"的（设置就是照着它挑的），不能拿来证明
放行。确认放行要用一个**谁都没看过**的种子块：种子分成块（``gate_block(k)``，每块 ``GATE_SIZE``
首，从 ``GATE_START`` 起），每一次“看”——配方试验、挑选失败后的重试、确认、发布后打印的表——都记进
``meta["release"]["looks"]``（种子、目的、结果）。:func:`fresh_gate` 给出第一个没被看过的块；
:func:`require_unseen` 拒绝在看过的块上确认（同一个块不能确认两次，失败了也不能换个设置再试）。
发布之后的验收表（命令行 ``eval``、模型卡、笔记本）用确认放行的那个块（:func:`gate_seeds`），
并用 :func:`seed_note` 写明它是不是挑选用过的种子；笔记本用 :func:`looks_table` 打印整段历史。
配方试验与研究脚本采样用 ``TRIAL_SEEDS``，从不碰验收块。种子的规则只定义在这里。
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .acceptance import acceptance_checks, distinct_n
from .errors import UserError
from .evaluate import poem_nll
from .generate import VerseSpec, sample_poems
from .sampling import SamplingParams
from .verse import is_valid_form, rates

# 发布设置里可以有的键：采样参数 + 押韵/平仄（诗体与藏头由用户每次自己选）
SETTING_KEYS = (*SamplingParams.names(), "rhyme", "tones")
# 没有发布设置的检查点（例如自己刚训练的）：SamplingParams 与 VerseSpec 的默认值
FALLBACK = {**SamplingParams().to_dict(), "rhyme": VerseSpec().rhyme, "tones": VerseSpec().tones}
GRID = {"temperature": (0.8, 0.9, 1.0), "top_p": (None, 0.95), "rhyme": (False, True)}
# (起始种子, 首数)。首数必须与门槛定下时一样（200 首）：distinct-n 随首数增多而变小，
# 100 首上通过的设置到 200 首可能不通过（第一次挑选就这样失败过）。
TUNE_SEEDS = (0, 200)            # choose 挑设置用（样本内）
TRIAL_SEEDS = (10_000, 200)      # 配方试验、研究脚本采样用：永远不是验收块
STUDY_SEEDS = (70_000, 200)      # scripts/rhyme_study.py 一直用的这块：也不当验收块
GATE_START, GATE_SIZE = 50_000, 200   # 验收块 k：种子 GATE_START + k·GATE_SIZE 起的 GATE_SIZE 首


def gate_block(k: int) -> tuple[int, int]:
    """第 k 个验收块的 (起始种子, 首数)。

    >>> gate_block(0), gate_block(5)
    ((50000, 200), (51000, 200))
    """
    return GATE_START + k * GATE_SIZE, GATE_SIZE


def _overlap(a, b) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def looks(meta: dict | None) -> list[dict]:
    """检查点记下的每一次“看”：[{"seeds": [起, 首数], "purpose": 目的, "outcome": 结果}]。"""
    return list(((meta or {}).get("release") or {}).get("looks") or [])


def require_unseen(history: list[dict], seeds) -> None:
    """seeds 与看过的任何一块重叠 → UserError（说出上次是为什么看的）。"""
    for look in history:
        if _overlap(tuple(seeds), tuple(look["seeds"])):
            raise UserError(f"种子 {seeds[0]}–{seeds[0] + seeds[1] - 1} 已经看过"
                            f"（{look['purpose']}：{look['outcome']}），不能再用来确认放行；"
                            f"换一个没看过的块（release.fresh_gate）")


def fresh_gate(history: list[dict]) -> tuple[int, int]:
    """第一个谁都没看过的验收块（与挑选、试验用的种子也不重叠）。"""
    taken = [*history, *({"seeds": s} for s in (TUNE_SEEDS, TRIAL_SEEDS, STUDY_SEEDS))]
    k = 0
    while any(_overlap(gate_block(k), tuple(t["seeds"])) for t in taken):
        k += 1
    return gate_block(k)


def record(history: list[dict], seeds, purpose: str, outcome: str) -> list[dict]:
    """history 加上一次“看”（返回新列表，不改原来的）。"""
    return [*history, {"seeds": [int(seeds[0]), int(seeds[1])], "purpose": purpose,
                       "outcome": outcome}]


def gate_seeds(meta: dict | None) -> tuple[int, int]:
    """发布之后打印验收表用的种子：最后一次“确认放行”通过的那个块；没有记录时第 0 块。"""
    passed = [look for look in looks(meta)
              if look["purpose"].startswith(CONFIRM) and look["outcome"].startswith("通过")]
    return tuple(passed[-1]["seeds"]) if passed else gate_block(0)


def looks_table(meta: dict | None) -> str:
    """看过的种子块，一行一次（笔记本 04、05 打印它，而不是断言“样本外”）。"""
    rows = [f"{i + 1}. 种子 {a}–{a + n - 1}（{n} 首）：{look['purpose']} → {look['outcome']}"
            for i, look in enumerate(looks(meta)) for a, n in [look["seeds"]]]
    return "\n".join(rows) if rows else "（这个检查点没有记下看过哪些种子）"


def seed_note(seeds: tuple[int, int]) -> str:
    """一句话说明一组 (起始种子, 首数) 与挑选发布设置的种子重不重叠，例如
    "种子 51000–51199（200 首；挑选发布设置用的是 0–199，不重叠）"。这块种子此前还被谁看过，
    见 :func:`looks_table`。"""
    start, n = seeds
    t0, tn = TUNE_SEEDS
    overlap = start < t0 + tn and t0 < start + n
    where = ("与挑选重叠：样本内，不能证明放行" if overlap else "不重叠")
    return f"种子 {start}–{start + n - 1}（{n} 首；挑选发布设置用的是 {t0}–{t0 + tn - 1}，{where}）"


def settings(meta: dict | None) -> dict:
    """检查点的发布解码设置（没有时退回 FALLBACK）；不合法的设置 → UserError。

    只有"没有这个键"或 None 才算没有设置；0、[]、"" 之类是坏的设置，照样报错。"""
    release = (meta or {}).get("release")
    release = {} if release is None else release
    if not isinstance(release, dict):
        raise UserError(f"检查点的 meta['release'] 应是字典，收到 {type(release).__name__}")
    given = release.get("settings")
    return validate_settings({} if given is None else given)


def validate_settings(given: dict) -> dict:
    """一组发布设置 → 补全后的字典。

    键只能是 SETTING_KEYS，值由 SamplingParams / VerseSpec 检查。"""
    if not isinstance(given, dict):
        raise UserError(f"发布设置应是字典，收到 {type(given).__name__}")
    unknown = sorted(set(given) - set(SETTING_KEYS))
    if unknown:
        raise UserError(f"发布设置里有未知的键：{', '.join(map(str, unknown))}")
    merged = {**FALLBACK, **given}
    spec = VerseSpec(rhyme=merged["rhyme"], tones=merged["tones"])
    return {**SamplingParams.from_dict(merged).to_dict(), "rhyme": spec.rhyme, "tones": spec.tones}


@dataclass(frozen=True)
class Decoding:
    """一次请求的解码设置，已经检查过：怎样选词 ``params``、写什么样的诗 ``spec``，以及发布设置里
    这次没用上的约束（``relaxed``，一句话一条）。命令行把它原样交给解码循环
    （``generate_batch(..., params=d.params, spec=d.spec)``），不再拆成关键字参数。"""
    params: SamplingParams
    spec: VerseSpec
    relaxed: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, d: dict) -> "Decoding":
        """:func:`for_request` 那样的字典（generate 的关键字参数，可以带 ``relaxed``）→ Decoding；
        参数在这里检查（SamplingParams 与 VerseSpec 各一次）。"""
        return cls(SamplingParams.from_dict(d), _spec(d), tuple(d.get("relaxed", ())))

    def to_dict(self) -> dict:
        """扁平的字典：采样参数 + 押韵/平仄（与 :func:`settings` 的键相同），再加给了的诗体、
        藏头、韵部与题目。"""
        verse = {k: v for k, v in vars(self.spec).items()
                 if k in ("rhyme", "tones") or v is not None}
        return {**self.params.to_dict(), **verse}


def decoding(meta: dict | None, given: dict, max_new_tokens: int | None = None,
             tok=None, prompt: str = "") -> Decoding:
    """同 :func:`for_request`，但返回建好、检查过的 :class:`Decoding`（命令行用它）。"""
    return Decoding.from_dict(for_request(meta, given, max_new_tokens, tok, prompt))


def for_request(meta: dict | None, given: dict, max_new_tokens: int | None = None,
                tok=None, prompt: str = "") -> dict:
    """用户这次给的参数（None = 没给）叠在发布设置上 → generate 的关键字参数。

    发布设置里的押韵/平仄是为"写一首完整的诗"定的：用户限定了 ``max_new_tokens``（只想续写
    几个字）而自己没要求押韵/平仄、也没选诗体或藏头时，它们不生效——否则只写 16 个字的请求会
    因为"不够写完一首押韵的诗"而失败。给了 ``tok`` 时再按 :func:`fit_prompt` 看这个开头。
    用户明确要求的约束照常检查。返回扁平的字典（笔记本里看得清楚，``**`` 展开就是
    ``generate`` 的参数）；要建好的对象用 :func:`decoding`。"""
    given = {k: v for k, v in given.items() if v is not None}
    decoding = whole_poem_only(settings(meta), given, max_new_tokens)
    return decoding if tok is None else fit_prompt(tok, prompt, decoding, given)


CONSTRAINT_FLAGS = {"rhyme": ("押韵", "--no-rhyme", '"rhyme": false'),   # 发布设置里的约束
                    "tones": ("平仄", "--no-tones", '"tones": false')}


def fit_prompt(tok, prompt: str, decoding: dict, given: dict) -> dict:
    """发布设置里的押韵/平仄是默认，不是要求：这个开头在它们之下写不下去时（《江雪》的仄韵
    首联、一句超过 7 个字的长提示……）这次就不加它们（没有别的约束时就是自由采样），并在
    返回的 ``decoding["relaxed"]`` 里用一句话说明；从不因此拒绝请求。

    用户自己要求（``given`` 里有）的押韵/平仄写不下去时照常报错，并说明怎样关掉它。
    返回值可以直接传给 ``generate_batch`` / ``stream_tokens``（``relaxed`` 之后还会收到解码时
    放宽过的地方）。"""
    implicit = [k for k in CONSTRAINT_FLAGS if decoding.get(k) and k not in given
                and not (k == "rhyme" and decoding.get("rhyme_group"))]
    try:
        _spec(decoding).check_prompt(tok, prompt)
        return {**decoding, "relaxed": []}
    except UserError as e:
        loose = {**decoding, **dict.fromkeys(implicit, False)}
        bare = {**decoding, "rhyme": False, "rhyme_group": None, "tones": False}
        explicit = [k for k in CONSTRAINT_FLAGS if decoding.get(k) and k not in implicit]
        if not _fits(tok, prompt, loose):          # 用户自己要求的约束写不下去：照常报错
            if explicit and _fits(tok, prompt, bare):
                names = "、".join(CONSTRAINT_FLAGS[k][0] for k in explicit)
                cli = " ".join(CONSTRAINT_FLAGS[k][1] for k in explicit)
                web = "、".join(CONSTRAINT_FLAGS[k][2] for k in explicit)
                raise UserError(f"{e}。不要求{names}的话：命令行加 {cli}，网页请求写 {web}") \
                    from None
            raise
        names = "、".join(CONSTRAINT_FLAGS[k][0] for k in implicit)
        rest = "改为自由采样" if not _spec(loose).active else "只用你自己要求的约束"
        return {**loose, "relaxed": [f"检查点的发布设置默认{names}，但这个开头写不下去（{e}）："
                                     f"这次不加{names}，{rest}"]}


def _spec(decoding: dict) -> VerseSpec:
    return VerseSpec(**{k: decoding[k] for k in VerseSpec.__dataclass_fields__ if k in decoding})


def _fits(tok, prompt: str, decoding: dict) -> bool:
    try:
        _spec(decoding).check_prompt(tok, prompt)
    except UserError:
        return False
    return True


def whole_poem_only(defaults: dict, given: dict, max_new_tokens: int | None) -> dict:
    """``defaults`` 叠上用户明确给出的 ``given``；规则见 :func:`for_request`（网页服务也用它）。"""
    decoding = dict(defaults)
    whole_poem = max_new_tokens is None or given.get("form") or given.get("acrostic")
    if not whole_poem:
        decoding.update(rhyme=False, tones=False)
    if given.get("rhyme_group") and given.get("rhyme") is False:   # 明说不押韵，又指定了韵部
        raise UserError(f"给了韵部 {given['rhyme_group']!r} 又说不押韵（--no-rhyme / "
                        "rhyme=false）：两者只能取一")
    decoding.update(given)
    if decoding.get("rhyme_group"):
        decoding["rhyme"] = True
    return decoding


def evaluate_setting(model, tok, train_text: str, val_loss: float, setting: dict,
                     seeds: tuple[int, int]) -> dict:
    """按一组设置采样 seeds[1] 首（种子从 seeds[0] 起），返回验收结果与平均负对数似然。"""
    start, n = seeds
    poems = sample_poems(model, tok, n, seed=start, **setting)
    checks = acceptance_checks(poems, train_text, val_loss=val_loss)
    scored = [p for p in poems if p]
    return {"setting": dict(setting), "seeds": list(seeds), "passed": all(c.passed for c in checks),
            "checks": {c.name: round(float(c.value), 4) for c in checks},
            "failed": [c.name for c in checks if not c.passed],
            "nll": round(float(np.mean(poem_nll(model, tok, scored))), 4) if scored else None,
            "examples": poems[:3]}


CONFIRM = "确认放行"                    # looks 里确认那一次的目的（gate_seeds 按它找）


def confirm(model, tok, train_text: str, val_loss: float, setting: dict, history: list[dict],
            seeds=None) -> tuple[dict, list[dict]]:
    """在一个没看过的块（默认 ``fresh_gate``）上确认一组设置 → (验收结果, 加上这一次的 history)。
    块看过了 → UserError；确认一次，这个块就用掉了（不论通过与否）。"""
    seeds = tuple(seeds) if seeds is not None else fresh_gate(history)
    require_unseen(history, seeds)
    result = evaluate_setting(model, tok, train_text, val_loss, setting, seeds)
    what = f"{CONFIRM}（{_label(setting)}）"
    return result, record(history, seeds, what, _verdict(result))


def choose(model, tok, train_text: str, val_loss: float, grid: dict = GRID,
           choose_seeds=TUNE_SEEDS, confirm_seeds=None, progress=print,
           history: list[dict] | None = None) -> dict:
    """在 grid 的每组设置上跑验收，挑出发布设置，在没看过的块上确认；返回要存进
    meta["release"] 的字典（``looks`` = history 加上这次的挑选与确认）。"""
    history = list(history or [])
    rows = []
    for values in itertools.product(*grid.values()):
        setting = {**FALLBACK, **dict(zip(grid, values))}
        rows.append(evaluate_setting(model, tok, train_text, val_loss, setting, choose_seeds))
        progress(f"{_label(setting)}：{_verdict(rows[-1])}；NLL {rows[-1]['nll']}")
    history = record(history, choose_seeds, f"挑选（{len(rows)} 组候选设置，样本内）",
                     f"{sum(r['passed'] for r in rows)} 组通过")
    passing = [r for r in rows if r["passed"]]
    if not passing:
        return {"settings": None, "candidates": rows, "confirmed": None, "looks": history,
                "reason": "没有一组候选设置通过全部验收项"}
    best = min(passing, key=lambda r: r["nll"])
    confirmed, history = confirm(model, tok, train_text, val_loss, best["setting"], history,
                                 confirm_seeds)
    progress(f"选中 {_label(best['setting'])}；确认（没看过的块）：{_verdict(confirmed)}")
    return {"settings": best["setting"] if confirmed["passed"] else None, "candidates": rows,
            "chosen": best, "confirmed": confirmed, "looks": history,
            "rule": "全部验收项通过的设置里，模型自己给诗的平均负对数似然最低者；"
                    "再在一个谁都没看过的种子块上确认"}


def _verdict(r: dict) -> str:
    return "通过" if r["passed"] else "未通过 " + "、".join(r["failed"])


def _label(s: dict) -> str:
    parts = [f"温度 {s['temperature']}", f"top-p {s['top_p']}" if s["top_p"] else "不截断"]
    parts += ["押韵约束"] if s.get("rhyme") else []
    parts += ["平仄约束"] if s.get("tones") else []
    return "、".join(parts)



# ---------------------------------------------------------------- 约束的代价
CONSTRAINT_SETTINGS = {                  # constraint_cost 比较的几种解码方式
    "自由": {},
    "诗体": {"form": None},
    "诗体+押韵": {"form": None, "rhyme": True},
    "诗体+押韵+平仄": {"form": None, "rhyme": True, "tones": True},
}


def constraint_cost(model, tok, n: int = 100, form: str = "五律", seed: int = 0,
                    temperature: float = 0.8) -> dict[str, dict[str, float]]:
    """约束的代价：每种解码方式（``CONSTRAINT_SETTINGS``，诗体都用 form）各采样 n 首，量
    模型自己的负对数似然（nats/字，越低 = 模型越"情愿"写）、distinct-1/2、诗体合格率、押韵率与
    平仄合格率。同一个种子序列，所以各行只差在约束上。"""
    table = {}
    for name, kw in CONSTRAINT_SETTINGS.items():
        kw = {k: (form if k == "form" else v) for k, v in kw.items()}
        poems = sample_poems(model, tok, n, seed=seed, temperature=temperature, **kw)
        rhyme_rate, tonal_share = rates(poems)
        table[name] = {"nll": float(np.mean(poem_nll(model, tok, poems))),
                       "distinct_1": distinct_n(poems, 1), "distinct_2": distinct_n(poems, 2),
                       "form_rate": sum(map(is_valid_form, poems)) / n,
                       "rhyme_rate": rhyme_rate, "tonal_share": tonal_share}
    return table
