"use strict";
const $ = (id) => document.getElementById(id);
for (const id of ["temperature", "top_k", "top_p"]) {
  $(id).addEventListener("input", () => { $(id + "_v").textContent = $(id).value; });
}

// 每句之后换行，便于阅读（原文仍是一行一首）
const pretty = (text) => text.replace(/([。？！])/g, "$1\n").trim();

function params() {
  const seed = $("seed").value.trim();
  return {
    prompt: $("prompt").value,
    form: $("form").value || null,
    acrostic: $("acrostic").value.trim() || null,
    temperature: Number($("temperature").value),
    top_k: Number($("top_k").value) || null,
    top_p: Number($("top_p").value),
    seed: seed === "" ? null : Number(seed),
  };
}

async function write(event) {
  if (event) event.preventDefault();
  const poem = $("poem"), status = $("status"), go = $("go");
  const p = params();
  let text = p.prompt;
  poem.textContent = pretty(text);
  poem.dataset.done = "0";
  status.className = ""; status.textContent = "正在写……";
  go.disabled = true;
  const t0 = performance.now();
  try {
    const res = await fetch("/api/stream", {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(p),
    });
    if (!res.ok) {
      const err = await res.json().catch(() => ({error: res.statusText}));
      throw new Error(err.zh || err.error);
    }
    const reader = res.body.getReader(), decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let nl;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const msg = JSON.parse(buffer.slice(0, nl));
        buffer = buffer.slice(nl + 1);
        if (msg.error) throw new Error(msg.zh || msg.error);   // 生成中途出错：最后一行是 {"error": …}
        if (msg.piece !== undefined) { text += msg.piece; poem.textContent = pretty(text); }
        if (msg.done) { text = msg.text; poem.textContent = pretty(text); }
      }
    }
    const n = text.length - p.prompt.length;
    status.textContent = `完成：${n} 个字，用时 ${((performance.now() - t0) / 1000).toFixed(1)} 秒。`;
    poem.dataset.done = "1";
  } catch (e) {
    status.className = "error";
    status.textContent = "出错了：" + e.message;
    poem.dataset.done = "error";
  } finally {
    go.disabled = false;
  }
}

$("controls").addEventListener("submit", write);

// 地址栏参数可以预填表单：/?prompt=春&form=五绝&seed=1&auto=1（auto=1 时打开页面就写）
const q = new URLSearchParams(location.search);
for (const key of ["prompt", "form", "acrostic", "temperature", "top_k", "top_p", "seed"]) {
  if (q.has(key)) { $(key).value = q.get(key); if ($(key + "_v")) $(key + "_v").textContent = q.get(key); }
}
if (q.get("auto") === "1") write();
