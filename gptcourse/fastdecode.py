"""快速解码：形状固定的单词元一步（预分配的 KV 缓存 + 掩码），可以交给 ``torch.compile``。

:mod:`gptcourse.generate` 的教学路径每一步调用 ``model(新位置, cache=…)``：缓存按已写入的长度
切片，每一步的形状都不同，每层还要走一遍 Python。这里换一种写法，数学上是同一个模型：

- K、V 缓冲区 [L, B, H, S_max, D] 一次分配好；新位置的 k、v 用 ``index_copy_`` 写进第 ``pos`` 格；
- 注意力总是看全部 S_max 个键，``pos`` 之后的位置用掩码挡掉（它们的权重是 exp(−∞) = 0）；
- ``pos`` 是一个张量，不是 Python 整数：每一步的输入形状和类型都一样，所以 ``torch.compile``
  只编译一次，之后每一步都是同一段编译好的代码（没有逐层的 Python、小算子融合在一起）；
- SwiGLU 的 gate 与 up 两个矩阵拼成一个 [2·Hd, C]（建解码器时拷一份）：每层少一次矩阵 × 向量；
- 编译时用 inductor 的 ``cpp_wrapper``：每一步的调度写成 C++，不再逐个算子经过 Python。

掩码掉的键对结果没有贡献，但 softmax 的求和顺序与按长度切片时不同，所以结果与教学路径只差
浮点舍入（fp32 下约 1e-6；测试比较贪心写出的词元与容差内的 logits）。``dtype=torch.bfloat16``
时权重与缓存用 bf16（权重的字节数减半），logits 仍以 fp32 返回。

编译要几十秒（inductor 的磁盘缓存热时几秒）：只在写的词元足够多、编译划算时才用它
（见 :func:`compile_pays` 与 ``docs/benchmarks.md``）。编译结果缓存在 :func:`inductor_cache_dir`
（默认在用户的缓存目录里，环境变量 ``GPTCOURSE_INDUCTOR_CACHE`` 可以改），所以网页演示
（``gptcourse serve``）第二次启动时只付一次很短的加载时间。
"""
from __future__ import annotations

import copy
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from .errors import UserError
from .model import eval_mode
from .rope import apply_rope

CACHE_ENV = "GPTCOURSE_INDUCTOR_CACHE"      # inductor 磁盘缓存的位置（默认见 inductor_cache_dir）
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


# ---------------------------------------------------------------- inductor 的磁盘缓存
def inductor_cache_dir() -> Path:
    """编译结果的磁盘缓存目录：``$GPTCOURSE_INDUCTOR_CACHE``，否则用户缓存目录下的
    ``gptcourse/inductor``（Linux：``$XDG_CACHE_HOME`` 或 ``~/.cache``；
    macOS：``~/Library/Caches``；Windows：``%LOCALAPPDATA%``）。"""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gptcourse" / "inductor"


def use_inductor_cache(path: Path | str | None = None) -> Path:
    """让 inductor 把编译结果放在 ``path``（默认 :func:`inductor_cache_dir`）。用户自己设了
    ``TORCHINDUCTOR_CACHE_DIR`` 时尊重它、不改。返回实际用的目录。

    目录建不了（没有权限、路径上有同名文件、``/proc`` 之类）→ UserError，说出路径和原因，
    什么都不改（:class:`FastDecoder` 接住它：照样编译，用 torch 自己的默认缓存目录）。"""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR") and path is None:
        return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    from_env = path is None and bool(os.environ.get(CACHE_ENV))
    path = Path(path).expanduser() if path is not None else inductor_cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as e:
        where = f"（环境变量 {CACHE_ENV}）" if from_env else ""
        raise UserError(f"编译缓存目录 {path}{where} 不能用（{e.strerror or type(e).__name__}）") \
            from None
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    try:                                 # inductor 已经导入时，它读的是自己的配置，不再读环境变量
        from torch._inductor import config as inductor_config
        inductor_config.cache_dir = str(path) if hasattr(inductor_config, "cache_dir") else None
    except Exception:                    # pragma: no cover - 老版本没有这个配置项
        pass
    return path


def compiler_available(device: torch.device | str = "cpu") -> tuple[bool, str]:
    """(能不能用 torch.compile, 不能时的原因)。CPU 上 inductor 需要 C++ 编译器。"""
    if torch.device(device).type == "cpu" and \
            not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return False, "torch.compile 在 CPU 上需要 C++ 编译器（g++ / clang++），这里没有"
    if sys.version_info >= (3, 14) and not hasattr(torch, "compiler"):   # pragma: no cover
        return False, "这个 Python 版本上 torch.compile 不可用"
    return True, ""


def weights_version(model) -> tuple | None:
    """模型参数与 buffer 的“版本”：每个张量的 (id, 原地修改计数)。优化器一步、
    ``load_state_dict``、``mul_`` 都会改变它，换掉参数对象也会。推理模式里建的张量没有修改计数
    → None（认不出变化）。"""
    try:
        return tuple((id(t), t._version) for t in (*model.parameters(), *model.buffers()))
    except RuntimeError:                    # inference tensors do not track version counter
        return None


def prime_inductor() -> bool:
    """先做掉 inductor 第一次编译时的那次 ``torch.fx.symbolic_trace``（结果缓存在进程里）。

    ``symbolic_trace`` 进行时会**全局**替换 ``nn.Module.__call__``：那一瞬间，别的线程里任何模块的
    调用都会失败（``NameError: module is not installed as a submodule``）。网页演示在后台线程里
    编译，同时别的线程在回答请求（教学路径调用模型）：偶尔一个请求得到 500。在开始后台编译
    之前、还没有别的线程时调用这里，之后的编译不再 trace。返回做没做（别的 torch 版本没有
    这个内部函数时 False，什么都不做）。"""
    try:
        from torch._inductor.loop_body import InterpreterShim
        InterpreterShim._dummy_gm()
        return True
    except Exception:  # noqa: BLE001 - 内部接口，版本不同时没有
        return False


# ---------------------------------------------------------------- 形状固定的一步
class StaticCache:
    """一批的 KV 缓存：每层一块 K、一块 V [B, H, S_max, D]，一次分配、清零（掩码挡掉的格子
    乘的是权重 0，格子里不能是 NaN）。每个调用者（每个请求）一个，编译好的一步在它们之间共用。"""

    def __init__(self, model, batch: int, dtype: torch.dtype):
        c, device = model.config, next(model.parameters()).device
        shape = (batch, c.n_head, c.block_size, c.head_dim)
        self.batch, self.max_len = batch, c.block_size
        self.kv = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(2 * c.n_layer)]
        self.tokens = torch.zeros(batch, dtype=torch.long, device=device)    # 这一步的输入
        self.pos = torch.zeros((), dtype=torch.long, device=device)


class DecodeStep(torch.nn.Module):
    """``step(tokens [B], pos [], kv) → logits [B, V]``（fp32）：B 行同时在位置 ``pos`` 上前进
    一个词元，新位置的 K、V 写进 ``kv``（:class:`StaticCache` 的 2L 块缓冲区）的第 pos 格。
    任何 :class:`~gptcourse.model.GPT` 配置都能用：用的就是模型自己的各层（归一化、qkv、RoPE 或
    学到的位置、MLP、输出头）。

    ``dtype``：None = 模型自己的精度；``torch.bfloat16`` = 权重转成 bf16 的副本（原模型不变）。
    """

    def __init__(self, model, dtype: torch.dtype | None = None):
        super().__init__()
        param = next(model.parameters())
        self.dtype = dtype or param.dtype
        self.copied = self.dtype != param.dtype
        self.source = weights_version(model)               # 建副本时原模型权重的“版本”
        if self.copied:
            model = copy.deepcopy(model).to(self.dtype).eval()   # 权重转成 bf16 的副本
        self.model = model                  # 不是副本时就是调用者的模型：不改它的 train/eval 模式
        self.register_buffer("slots", torch.arange(model.config.block_size, device=param.device),
                             persistent=False)
        # SwiGLU：gate 与 up 拼成一个矩阵 [2·Hd, C]，一次矩阵 × 向量算出两者。这是一份拷贝
        # （buffer，编译好的一步把它当输入读）：原模型的权重变了，refresh() 原地更新它，不必重新编译
        self.fused = [b.mlp.swiglu and b.mlp.gate.bias is None for b in model.blocks]
        for i, block in enumerate(model.blocks):
            if self.fused[i]:
                self.register_buffer(f"gate_up_{i}", self._gate_up(block.mlp), persistent=False)

    @staticmethod
    def _gate_up(mlp) -> torch.Tensor:
        return torch.cat([mlp.gate.weight, mlp.up.weight]).detach().clone()     # [2·Hd, C]

    def refresh(self, model) -> None:
        """原模型（不是 bf16 副本时）的权重变过：把拼好的 gate_up 原地更新成新权重。"""
        with torch.inference_mode():       # 拷贝可能是在推理模式里建的
            for i, block in enumerate(model.blocks):
                if self.fused[i]:
                    getattr(self, f"gate_up_{i}").copy_(self._gate_up(block.mlp))
        self.source = weights_version(model)

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor,
                kv: list[torch.Tensor]) -> torch.Tensor:
        m = self.model
        x = m.tok_emb(tokens)[:, None]                                 # [B, 1, C]
        rope = None
        if m.config.pos == "learned":
            x = x + m.pos_emb(pos.view(1))
        else:
            rope = (m.rope_cos.index_select(0, pos.view(1)),          # [1, D/2]：真实位置
                    m.rope_sin.index_select(0, pos.view(1)))
        see = (self.slots <= pos).view(1, 1, 1, -1)                   # [1, 1, 1, S]：能看的键
        for i, block in enumerate(m.blocks):
            x = x + self._attend(block.attn, block.norm1(x), rope, see, kv[2 * i],
                                 kv[2 * i + 1], pos)
            x = x + self._mlp(block.mlp, block.norm2(x),
                              getattr(self, f"gate_up_{i}") if self.fused[i] else None)
        return m.lm_head(m.norm_f(x))[:, 0].float()                   # [B, V]

    @staticmethod
    def _mlp(mlp, x, gate_up) -> torch.Tensor:
        """一层 MLP：x [B, 1, C] → [B, 1, C]；SwiGLU 用拼好的 gate_up [2·Hd, C]。"""
        if gate_up is None:
            return mlp(x)
        gate, up = F.linear(x, gate_up).chunk(2, dim=-1)             # 各 [B, 1, Hd]
        return mlp.down(F.silu(gate) * up)

    @staticmethod
    def _attend(attn, x, rope, see, kc, vc, pos) -> torch.Tensor:
        """一层注意力：x [B, 1, C] → [B, 1, C]；k、v 写进缓存 kc、vc [B, H, S, D] 的第 pos 格，
        再看第 0…pos 格（其余格子被掩码挡掉）。"""
        B, _, C = x.shape
        qkv = attn.split_heads(x)                                      # [3, B, H, 1, D]
        if rope is not None:
            q, k = apply_rope(qkv[:2], *rope).unbind(0)
        else:
            q, k = qkv[0], qkv[1]
        kc.index_copy_(2, pos.view(1), k)
        vc.index_copy_(2, pos.view(1), qkv[2])
        y = F.scaled_dot_product_attention(q, kc, vc, attn_mask=see)   # [B, H, 1, D]
        return attn.proj(y.transpose(1, 2).reshape(B, 1, C))


class FastDecoder:
    """一个模型、一种精度的快速一步：:class:`DecodeStep`，可选 ``torch.compile``（编译一次，
    所有批大小相同的调用者共用；换批大小会再编译一次）。

    ``decoder(cache, column [B], t) → logits [B, V]``：把第 t 列的词元写进 ``cache``
    （:meth:`new_cache`），返回位置 t 的 logits。编译失败（没有 C++ 编译器、dynamo 不支持）时退回
    不编译的同一个 DecodeStep，并在 ``reason`` 里说明；结果不变，只是慢一些。线程安全：第一次
    调用（编译）在锁里进行，之后各线程用各自的缓存并发调用。
    """

    def __init__(self, model, dtype: torch.dtype | None = None, compile: bool = True,
                 cache_dir: Path | str | None = None):
        self.step = DecodeStep(model, dtype)
        self.dtype, self.max_len = self.step.dtype, self.step.model.config.block_size
        self.compiled, self.reason, self.compile_seconds = False, "未编译", {}
        self._fn = self.step
        if compile:
            ok, why = compiler_available(self.step.slots.device)
            if not ok:
                self.reason = why + "，改用不编译的快速一步"
            else:
                note = ""
                try:
                    use_inductor_cache(cache_dir)
                except UserError as e:          # 缓存目录不能用：照样编译，用 torch 的默认目录
                    note = f"（{e}，用 torch 的默认缓存目录）"
                prime_inductor()                # 别的线程同时调用模型也不出错（见该函数）
                self._fn = torch.compile(self.step, fullgraph=True, dynamic=False,
                                         options={"cpp_wrapper": True})
                self.compiled, self.reason = True, "torch.compile" + note
        self._lock = threading.Lock()
        self._warm: set[int] = set()                   # 已经编译好的批大小

    def new_cache(self, batch: int = 1) -> StaticCache:
        return StaticCache(self.step.model, batch, self.dtype)

    def ready(self, batch: int = 1) -> bool:
        """这个批大小已经编译好（或者不需要编译）。"""
        return not self.compiled or batch in self._warm

    def warm_up(self, batch: int = 1) -> float:
        """对一个临时缓存跑一步（触发这个批大小的编译）→ 用了几秒。"""
        t0 = time.perf_counter()
        self(self.new_cache(batch), torch.zeros(batch, dtype=torch.long), 0)
        return time.perf_counter() - t0

    def __call__(self, cache: StaticCache, column: torch.Tensor, t: int) -> torch.Tensor:
        """第 t 列的词元 column [B]（位置 t）写进 cache → 位置 t 的 logits [B, V]（fp32）。"""
        if not 0 <= t < self.max_len:
            raise UserError(f"位置 {t} 超出了缓存（block_size={self.max_len}）")
        cache.tokens.copy_(column)
        cache.pos.fill_(t)
        args = (cache.tokens, cache.pos, cache.kv)
        with torch.inference_mode(), eval_mode(self.step.model):   # 解码总在 eval（无 dropout）
            if self.ready(cache.batch):
                return self._fn(*args)
            with self._lock:                               # 编译只在一个线程里进行
                if self.ready(cache.batch):
                    return self._fn(*args)
                t0 = time.perf_counter()
                try:
                    out = self._fn(*args)
                except Exception as e:                     # 编译失败：同一个 DecodeStep，不编译
                    self._fn, self.compiled = self.step, False
                    self.reason = (f"torch.compile 失败（{type(e).__name__}: {str(e)[:200]}），"
                                   "改用不编译的快速一步")
                    return self._fn(*args)
                self.compile_seconds[cache.batch] = time.perf_counter() - t0
                self._warm.add(cache.batch)
                return out


# ---------------------------------------------------------------- 每个模型一份
# 解码器挂在模型自己身上：{(dtype, 是否编译): 解码器}。不用以模型为键的 WeakKeyDictionary：
# fp32 的解码器引用着模型本身（它的各层就是解码器的各层），值引用键，键就永远不会被回收
# （循环里建模型、compile=True 生成，每个模型都留在内存里）。挂在模型上是一个普通的引用环，
# 模型不用了就一起被回收；复制（deepcopy）、序列化模型时这张表不跟着走。
_ATTR = "_gptcourse_fast_decoders"
_DECODERS_LOCK = threading.Lock()


class _Decoders(dict):
    """一个模型的解码器表。复制或序列化模型时得到一张空表：副本要用自己的权重建解码器。"""

    def __deepcopy__(self, memo):
        return _Decoders()

    def __copy__(self):
        return _Decoders()

    def __reduce__(self):
        return (_Decoders, ())


def _table(model, create: bool = False) -> dict:
    table = model.__dict__.get(_ATTR)
    if table is None:
        table = _Decoders()
        if create:
            object.__setattr__(model, _ATTR, table)      # 普通属性，不是子模块、不进 state_dict
    return table


def decoder_for(model, dtype: torch.dtype | None = None, compile: bool = True) -> FastDecoder:
    """这个模型的快速解码器（同一个模型、精度与是否编译只建一次，之后一直复用）。

    精度与模型不同时（bf16）解码器用的是权重的一份副本：之后模型的权重变了（继续训练、
    ``load_state_dict``），这里认得出（:func:`weights_version`）并重建副本，不会悄悄用旧权重。
    认不出的：绕过 autograd 的 ``p.data.mul_(…)``、``p.data = …`` 不改版本号——这样改了权重之后
    请调用 :func:`forget`。"""
    dtype = dtype or next(model.parameters()).dtype
    with _DECODERS_LOCK:
        per_model = _table(model, create=True)
        key = (dtype, bool(compile))
        if key not in per_model or _stale(per_model[key], model):
            per_model[key] = FastDecoder(model, dtype, compile)
        return per_model[key]


def _stale(decoder: FastDecoder, model) -> bool:
    """解码器建好之后，原模型的权重变过：bf16 副本 → True（重建）；不是副本时解码器用的就是模型
    自己的权重，只有拼好的 gate_up 是拷贝 → 原地更新它（不必重新编译），返回 False。"""
    if decoder.step.source == weights_version(model):
        return False
    if decoder.step.copied:
        return True
    decoder.step.refresh(model)
    return False


def cached_decoder(model, dtype: torch.dtype | None = None) -> FastDecoder | None:
    """已经建好、编译好（批大小 1）的解码器；没有时 None（不会触发编译）。"""
    dtype = dtype or next(model.parameters()).dtype
    d = _table(model).get((dtype, True))
    return d if d is not None and d.compiled and d.ready(1) and not _stale(d, model) else None


def forget(model) -> None:
    """丢掉这个模型的快速解码器（权重变了之后调用）。"""
    with _DECODERS_LOCK:
        model.__dict__.pop(_ATTR, None)


def warm_up_in_background(model, dtype: torch.dtype | None = None) -> threading.Thread:
    """在后台线程里编译这个模型批大小 1 的快速一步（网页演示启动时用）；编译好之前，
    ``compile=None`` 的请求走普通路径。"""
    def work():
        try:
            decoder_for(model, dtype, compile=True).warm_up(1)
        except Exception as e:  # noqa: BLE001 - 后台线程：一行说明，请求照常走普通路径
            why = " ".join(str(e).split())[:200]
            print(f"注：后台编译快速解码失败（{type(e).__name__}: {why}），网页演示照常（不编译）",
                  file=sys.stderr)
    prime_inductor()                    # 在这个线程里、请求开始之前（见 prime_inductor）
    thread = threading.Thread(target=work, name="gptcourse-compile", daemon=True)
    thread.start()
    return thread
