"use strict";
const $ = (id) => document.getElementById(id);
for (const id of ["temperature", "top_k", "top_p"]) {
  $(id).addEventListener("input", () => { $(id + "_v").textContent = $(id).value; });
}

// 每句之后换行，便于阅读（原文仍是一行一首）
const pretty = (text) => text.replace(/([。？！])/g, "$1\n").trim();
const LINE_ENDS = "。？！";

function params() {
  const seed = $("seed").value.trim();
  return {
    prompt: $("prompt").value,
    title: $("title").value.trim() || null,
    form: $("form").value || null,
    acrostic: $("acrostic").value.trim() || null,
    rhyme: $("rhyme").checked,
    tones: $("tones").checked,
    temperature: Number($("temperature").value),
    top_k: Number($("top_k").value) || null,
    top_p: Number($("top_p").value),
    seed: seed === "" ? null : Number(seed),
  };
}

// 写完之后：每个字下面标出它的平仄（平/仄/中），韵脚高亮。a 是服务器的格律报告，
// a.tones[i] 与 a.rhyme_positions 都按字（码位）数下标，和 [...text] 一一对应。
function annotate(box, text, a) {
  const rhyme = new Set(a.rhyme_positions);
  const lines = [];
  let line = null;
  [...text].forEach((ch, i) => {
    if (ch === "\n") { line = null; return; }
    if (!line) { line = document.createElement("div"); line.className = "line"; lines.push(line); }
    const r = document.createElement("ruby");
    r.append(ch);
    const rt = document.createElement("rt");
    rt.textContent = a.tones[i] || "";
    r.append(rt);
    if (a.tones[i]) r.dataset.tone = a.tones[i];
    if (rhyme.has(i)) { r.className = "rhyme"; r.title = "韵脚：" + a.rhyme_group; }
    line.append(r);
    if (LINE_ENDS.includes(ch)) line = null;
  });
  box.replaceChildren(...lines);
  const parts = [a.form ? "诗体：" + a.form : "不是完整的近体诗"];
  parts.push(a.rhymes ? `押韵：${a.rhyme_group}（红底的字是韵脚）` : "不押韵");
  if (a.checkable) parts.push(`平仄：${a.checkable} 条可判断的规则里 ${a.held} 条成立`);
  $("verse").textContent = parts.join(" · ");
}

async function write(event) {
  if (event) event.preventDefault();
  const poem = $("poem"), status = $("status"), go = $("go");
  const p = params();
  let text = p.prompt;
  poem.textContent = pretty(text);
  poem.dataset.done = "0";
  $("verse").textContent = "";
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
    let buffer = "", analysis = null, relaxed = [];
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
        if (msg.done) { text = msg.text; analysis = msg.analysis; relaxed = msg.relaxed || []; }
      }
    }
    if (!analysis) throw new Error("连接中断，诗没有写完");
    const notes = relaxed.length ? "（" + relaxed.join("；") + "）" : "";
    poem.dataset.text = text;
    annotate(poem, text, analysis);
    const n = text.length - p.prompt.length;
    status.textContent = `完成：${n} 个字，用时 ${((performance.now() - t0) / 1000).toFixed(1)} 秒。${notes}`;
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

// 滑块的范围 = 服务器的 ranges（zero_ok 里的参数另外允许正好 0），初始值 = 服务器的默认解码设置
// （检查点的发布设置）：页面自己不写任何数值。地址栏参数可以再覆盖：
// /?prompt=春&form=五绝&rhyme=1&seed=1&auto=1（auto=1 时打开页面就写）
function setValue(key, value) {
  $(key).value = value;
  if ($(key + "_v")) $(key + "_v").textContent = value;
}

async function init() {
  try {
    const info = await (await fetch("/api/info")).json();
    for (const [key, [lo, hi]] of Object.entries(info.ranges)) {
      if (!$(key)) continue;                                 // 没有滑块的参数（重复惩罚）
      $(key).min = info.zero_ok.includes(key) ? 0 : lo;
      $(key).max = hi;
    }
    const d = info.defaults;
    setValue("temperature", d.temperature);
    setValue("top_p", d.top_p === null ? 1 : d.top_p);
    if (d.top_k !== null) setValue("top_k", d.top_k);
    $("rhyme").checked = Boolean(d.rhyme);
    $("tones").checked = Boolean(d.tones);
  } catch (e) { /* 拿不到范围与默认值：滑块停在中间，数值显示"…" */ }
  const q = new URLSearchParams(location.search);
  for (const key of ["prompt", "title", "form", "acrostic", "temperature", "top_k", "top_p",
                     "seed"]) {
    if (q.has(key)) setValue(key, q.get(key));
  }
  for (const key of ["rhyme", "tones"]) if (q.has(key)) $(key).checked = q.get(key) === "1";
  document.body.dataset.ready = "1";
  if (q.get("auto") === "1") write();
}
init();
