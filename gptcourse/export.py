"""导出到 Hugging Face 的格式：课程的模型离开课程，也能用别人的工具加载。

``python -m gptcourse export --hf 目录`` 写出一个 ``transformers`` 认得的文件夹::

    config.json              结构（LlamaForCausalLM 或 GPT2LMHeadModel）
    model.safetensors        权重（safetensors：只有张量，没有可执行的代码）
    tokenizer.json           字符级分词器（用 ``tokenizers`` 库建的：一个字一个词元）
    tokenizer_config.json    特殊词元：换行 "\\n" 既是开头也是结尾，<unk> 显示为 "�"
    generation_config.json   发布的解码设置（温度、top-k、top-p、重复惩罚）
    README.md                模型卡：训练命令、步数、验证集损失、许可

之后 ``AutoModelForCausalLM.from_pretrained(目录)``、``AutoTokenizer.from_pretrained(目录)`` 和
``pipeline("text-generation", model=目录)`` 都能直接用（``tests/test_export.py`` 用真的
``transformers`` 检查：logits 相差 ≤ 1e-4、贪心续写逐字相同、验证集上分词来回不变）。

哪种结构对应哪个类，只看配置（:func:`architecture`）：

- RoPE（rotate-half）+ RMSNorm + SwiGLU：就是一个小 LLaMA（``course``、``teacher`` 预设）；
- 学到的绝对位置 + LayerNorm + GELU：GPT-2 的结构（``gpt2``、``mini`` 预设）。

两边的差别只在权重的摆法：我们的 Q/K/V 可能是一个融合的 ``Linear(C, 3C)``（LLaMA 要三个分开的），
GPT-2 的 ``Conv1D`` 存的是转置的矩阵 [输入, 输出]。本模块只做这些搬运，不需要装 ``transformers``；
写文件需要 ``safetensors`` 与 ``tokenizers``（``pip install -e ".[export]"``）。
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from . import files
from .errors import UserError
from .release import settings
from .tokenizer import EOS, UNK, CharTokenizer

FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
         "special_tokens_map.json", "generation_config.json", "README.md")


def architecture(cfg) -> str:
    """``"llama"`` 或 ``"gpt2"``；两种都不是时 UserError（说出哪一项不对）。"""
    if (cfg.pos, cfg.norm, cfg.mlp) == ("rope", "rmsnorm", "swiglu"):
        return "llama"
    if (cfg.pos, cfg.norm, cfg.mlp) == ("learned", "layernorm", "gelu"):
        return "gpt2"
    raise UserError(f"只能导出两种结构：RoPE + RMSNorm + SwiGLU（LLaMA）或学到的位置 + LayerNorm + "
                    f"GELU（GPT-2）；这个模型是 pos={cfg.pos}、norm={cfg.norm}、mlp={cfg.mlp}")


def _qkv(attn, C: int) -> tuple[torch.Tensor, ...]:
    """(Wq, Wk, Wv, bq, bk, bv)：融合的 [3C, C] 按行切成三块；没有偏置时偏置为 None。"""
    if hasattr(attn, "qkv"):
        w = attn.qkv.weight.split(C, 0)
        b = attn.qkv.bias.split(C, 0) if attn.qkv.bias is not None else (None,) * 3
    else:
        w = (attn.q.weight, attn.k.weight, attn.v.weight)
        b = (attn.q.bias, attn.k.bias, attn.v.bias)
    return (*w, *b)


def llama_weights(model) -> tuple[dict, dict[str, torch.Tensor]]:
    """课程的 GPT → (LLaMA 的 config 字典, 权重字典)。权重共享时不写 lm_head
    （config 的 tie_word_embeddings 说共享）。"""
    c = model.config
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "vocab_size": c.vocab_size, "hidden_size": c.n_embd,
              "intermediate_size": c.mlp_hidden, "num_hidden_layers": c.n_layer,
              "num_attention_heads": c.n_head, "num_key_value_heads": c.n_head,
              "head_dim": c.head_dim, "max_position_embeddings": c.block_size,
              "rms_norm_eps": c.norm_eps, "rope_theta": c.rope_base,
              "tie_word_embeddings": c.tie_weights, "attention_bias": c.bias,
              "mlp_bias": c.bias, "hidden_act": "silu", "torch_dtype": "float32"}
    sd = {"model.embed_tokens.weight": model.tok_emb.weight,
          "model.norm.weight": model.norm_f.weight}
    if not c.tie_weights:
        sd["lm_head.weight"] = model.lm_head.weight
    for i, b in enumerate(model.blocks):
        p = f"model.layers.{i}."
        q, k, v, bq, bk, bv = _qkv(b.attn, c.n_embd)
        named = {"self_attn.q_proj": (q, bq), "self_attn.k_proj": (k, bk),
                 "self_attn.v_proj": (v, bv),
                 "self_attn.o_proj": (b.attn.proj.weight, b.attn.proj.bias),
                 "mlp.gate_proj": (b.mlp.gate.weight, b.mlp.gate.bias),
                 "mlp.up_proj": (b.mlp.up.weight, b.mlp.up.bias),
                 "mlp.down_proj": (b.mlp.down.weight, b.mlp.down.bias)}
        for name, (w, bias) in named.items():
            sd[p + name + ".weight"] = w
            if bias is not None:
                sd[p + name + ".bias"] = bias
        sd[p + "input_layernorm.weight"] = b.norm1.weight
        sd[p + "post_attention_layernorm.weight"] = b.norm2.weight
    return config, sd


def gpt2_weights(model) -> tuple[dict, dict[str, torch.Tensor]]:
    """课程的 GPT（学到的位置、LayerNorm、GELU）→ GPT-2 的 (config, 权重)。

    GPT-2 的 ``Conv1D`` 权重是 [输入, 输出]，所以每个矩阵都转置；它总有偏置，我们没有时补 0。"""
    c = model.config
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
              "vocab_size": c.vocab_size, "n_positions": c.block_size, "n_ctx": c.block_size,
              "n_embd": c.n_embd, "n_layer": c.n_layer, "n_head": c.n_head,
              "n_inner": c.mlp_hidden, "layer_norm_epsilon": c.norm_eps,
              "activation_function": "gelu_new" if c.gelu_approx == "tanh" else "gelu",
              "resid_pdrop": c.resid_dropout, "embd_pdrop": c.dropout,
              "attn_pdrop": c.attn_dropout, "tie_word_embeddings": c.tie_weights,
              "scale_attn_weights": True, "torch_dtype": "float32"}

    def bias(lin, n):
        return lin.bias if lin.bias is not None else torch.zeros(n)

    def ln(norm):
        return norm.weight, (norm.bias if norm.bias is not None else torch.zeros(c.n_embd))

    sd = {"transformer.wte.weight": model.tok_emb.weight,
          "transformer.wpe.weight": model.pos_emb.weight}
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = ln(model.norm_f)
    if not c.tie_weights:
        sd["lm_head.weight"] = model.lm_head.weight
    C = c.n_embd
    for i, b in enumerate(model.blocks):
        p = f"transformer.h.{i}."
        q, k, v, bq, bk, bv = _qkv(b.attn, C)
        qkv_bias = [x if x is not None else torch.zeros(C) for x in (bq, bk, bv)]
        sd[p + "attn.c_attn.weight"] = torch.cat([q, k, v], 0).T          # [C, 3C]
        sd[p + "attn.c_attn.bias"] = torch.cat(qkv_bias)
        sd[p + "attn.c_proj.weight"] = b.attn.proj.weight.T
        sd[p + "attn.c_proj.bias"] = bias(b.attn.proj, C)
        sd[p + "mlp.c_fc.weight"] = b.mlp.fc.weight.T                     # [C, 4C]
        sd[p + "mlp.c_fc.bias"] = bias(b.mlp.fc, c.mlp_hidden)
        sd[p + "mlp.c_proj.weight"] = b.mlp.proj.weight.T
        sd[p + "mlp.c_proj.bias"] = bias(b.mlp.proj, C)
        sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = ln(b.norm1)
        sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = ln(b.norm2)
    return config, sd


def hf_tokenizer(tok: CharTokenizer):
    """字符级分词器 → ``tokenizers.Tokenizer``：每个字（含换行）单独切开，查同一张词表；
    词表外的字 → <unk>（"�"）；解码时把字直接拼起来（不加空格）。"""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {tok.piece(i): i for i in range(tok.vocab_size)}
    if len(vocab) != tok.vocab_size:
        raise UserError("词表里有重复的字，无法写成 tokenizer.json")
    ht = Tokenizer(models.WordLevel(vocab, unk_token=UNK if tok.unk_id is not None else None))
    ht.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    ht.decoder = decoders.Fuse()
    ht.post_processor = processors.TemplateProcessing(      # 和课程的 generate 一样：开头一个换行
        single=f"{EOS} $A", special_tokens=[(EOS, tok.eos_id)])
    return ht


def _card(meta: dict, arch: str, decoding: dict) -> str:
    rel = meta.get("release") or {}
    lines = ["---", "language: zh", "license: mit", "library_name: transformers",
             "pipeline_tag: text-generation", "tags: [gptcourse, tang-poetry, char-level]", "---",
             "", "# gptcourse 课程模型（导出）", "",
             "从零训练的字符级 GPT，写唐代近体诗（五绝、五律、七绝、七律）；只用于教学。",
             f"结构：{'LlamaForCausalLM' if arch == 'llama' else 'GPT2LMHeadModel'}，"
             "由 `python -m gptcourse export --hf` 从课程的检查点逐个权重搬过来。", "",
             "| 项目 | 内容 |", "|---|---|",
             f"| 训练命令 | `{meta.get('command', '没有记录')}` |",
             f"| 步数 / 词元 | {meta.get('steps', meta.get('step', '?'))} / "
             f"{meta.get('tokens', '?')} |",
             f"| 验证集损失 | {rel.get('val_loss', meta.get('best_val_loss', '没有记录'))} "
             "nats/字 |",
             f"| 发布的解码设置 | {decoding} |", "",
             "用法（提示前面要有一个换行，分词器会自动加上）：", "", "```python",
             "from transformers import pipeline",
             "pipe = pipeline(\"text-generation\", model=\"这个目录\")",
             "print(pipe(\"春风\", max_new_tokens=40)[0][\"generated_text\"])", "```", "",
             "发布设置里的押韵约束（按平水韵屏蔽韵脚）是课程自己的解码器做的，",
             "`transformers` 的 `generate` 没有它：这里的 `generation_config.json`",
             "只带温度、top-k、top-p 与重复惩罚。", ""]
    return "\n".join(lines)


def generation_config(tok, decoding: dict, max_new_tokens: int) -> dict:
    """发布的解码设置 → ``generation_config.json``（温度 0 = 贪心）。"""
    t = decoding["temperature"]
    out = {"bos_token_id": tok.eos_id, "eos_token_id": tok.eos_id, "pad_token_id": tok.eos_id,
           "do_sample": t > 0, "max_new_tokens": max_new_tokens,
           "repetition_penalty": decoding["repetition_penalty"]}
    if t > 0:
        # top_k 为 None = 不截断（不写它，transformers 会用它自己的默认值 50）
        out |= {"temperature": t, "top_k": decoding["top_k"],
                "top_p": decoding["top_p"] if decoding["top_p"] is not None else 1.0}
    return out


def _write_folder(tmp: Path, model, tok: CharTokenizer, meta: dict) -> None:
    from safetensors.torch import save_file

    arch = architecture(model.config)
    config, sd = (llama_weights if arch == "llama" else gpt2_weights)(model)
    config |= {"bos_token_id": tok.eos_id, "eos_token_id": tok.eos_id,
               "pad_token_id": tok.eos_id}
    _put(tmp / "config.json", json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    save_file({k: v.detach().float().contiguous().clone() for k, v in sd.items()},
              str(tmp / "model.safetensors"), metadata={"format": "pt"})
    hf_tokenizer(tok).save(str(tmp / "tokenizer.json"))
    special = {"bos_token": EOS, "eos_token": EOS, "pad_token": EOS}
    if tok.unk_id is not None:
        special["unk_token"] = UNK
    _put(tmp / "special_tokens_map.json", json.dumps(special, ensure_ascii=False) + "\n")
    tconf = {**special, "tokenizer_class": "PreTrainedTokenizerFast",
             "model_max_length": model.config.block_size, "clean_up_tokenization_spaces": False,
             "model_input_names": ["input_ids", "attention_mask"],
             }
    _put(tmp / "tokenizer_config.json", json.dumps(tconf, ensure_ascii=False) + "\n")
    decoding = settings(meta)
    gen = generation_config(tok, decoding, model.config.block_size)
    _put(tmp / "generation_config.json", json.dumps(gen, indent=2) + "\n")
    _put(tmp / "README.md", _card(meta, arch, decoding))


def _put(path: Path, text: str) -> None:
    """写进 :func:`gptcourse.files.replacing_folder` 的临时目录：整个目录最后一次换上去。"""
    path.write_text(text, encoding="utf-8")  # 不经 files：在 replacing_folder 的临时目录里


def export_hf(model, tok, meta: dict | None, out: str | Path, force: bool = False,
              inputs: tuple[str | Path, ...] = ()) -> Path:
    """把模型写成 Hugging Face 的文件夹 ``out``（文件见 ``FILES``）→ out 的路径。

    先写进旁边的临时目录，写完才换到 ``out``：中途出错，``out`` 原来的内容不动。``out`` 已有
    文件时拒绝（UserError），除非 ``force``；``force`` 也只覆盖以前导出的文件夹（里面只有
    ``FILES``），从不覆盖别的文件（仓库、检查点所在的目录……），也不覆盖 ``inputs``（这条命令读的
    文件，例如检查点）所在的目录。``out`` 是文件或符号链接也拒绝。磁盘满、只读、没有权限 →
    :class:`MachineError`（一句话），临时目录删掉。"""
    if not isinstance(tok, CharTokenizer):
        raise UserError(f"只能导出字符级分词器的模型（这个是 {type(tok).__name__}）")
    architecture(model.config)                                  # 先检查结构，再动文件
    try:
        import safetensors  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:
        raise UserError('导出需要 safetensors 与 tokenizers：pip install -e ".[export]"') from None
    out = _check_target(out, force, inputs)
    try:
        from safetensors import SafetensorError
    except ImportError:                                         # 旧版 safetensors 没有导出它
        SafetensorError = OSError  # noqa: N806
    with files.replacing_folder(out, failures=(OSError, SafetensorError)) as tmp, \
            torch.no_grad():
        _write_folder(tmp, model, tok, meta or {})
    return out


def _check_target(text: str | Path, force: bool, inputs: tuple[str | Path, ...]) -> Path:
    """--hf 的目录：名字不为空、不是文件、不是符号链接、上级不是文件；已有内容时见 export_hf。"""
    if not str(text).strip():
        raise UserError("--hf 是空的：请给一个目录名")
    out = Path(os.path.abspath(text))                 # “.”“..”“dir/” 都变成有名字的绝对路径
    if out.is_symlink():
        raise UserError(f"--hf {text} 是符号链接：请直接给一个目录（不跟着链接写到别处）")
    if out.exists() and not out.is_dir():
        raise UserError(f"--hf 应是一个目录，{out} 是文件")
    parent = files.nearest_existing(out.parent)
    if not parent.is_dir():
        raise UserError(f"--hf {text} 建不了：上级 {parent} 是文件")
    if out.is_dir():
        entries = sorted(p.name for p in out.iterdir())
        if entries and not force:
            raise UserError(f"{out} 不是空目录；要覆盖请加 --force")
        others = [n for n in entries if n not in FILES]
        if others:
            raise UserError(f"--force 只覆盖以前导出的文件夹；{out} 里还有别的文件（"
                            f"{'、'.join(others[:3])}{' …' if len(others) > 3 else ''}），不动它")
        for f in inputs:
            if f is not None and Path(os.path.abspath(f)).parent == out:
                raise UserError(f"--hf {out} 是检查点 {f} 所在的目录：换一个目录")
    return out
