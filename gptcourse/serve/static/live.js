"use strict";
// 课堂演示：拖动滑块 → /api/next 画出下一个字的分布（过滤前/后），/api/generate 用同一个种子重写诗；
// 输入一句诗 → /api/attention 画出选中的层、头的注意力热力图。只用同源请求和内联 SVG，不下载任何东西。
// $ 与 params() 来自 app.js（先加载）。
const SVG = "http://www.w3.org/2000/svg";
const LIVE = ["temperature", "top_k", "top_p", "repetition_penalty"];
const BARS = 15;                       // 条形图画几个字
const show = (ch) => (ch === "\n" ? "↵" : ch);

function svg(tag, attrs, text) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

// 连续拖动时只发最后一次：wait 毫秒内没有新的输入才调用 fn
function debounce(fn, wait) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, wait); };
}

// 同一种请求只留最新的一个：新的发出时取消旧的，旧的回答也不会再画
function latest() {
  let ctrl = null;
  return async (path, body) => {
    if (ctrl) ctrl.abort();
    const mine = ctrl = new AbortController();
    const res = await fetch(path, {
      method: "POST", headers: {"Content-Type": "application/json"},
      body: JSON.stringify(body), signal: mine.signal,
    });
    const data = await res.json().catch(() => ({error: res.statusText}));
    if (mine !== ctrl) throw new DOMException("过时的回答", "AbortError");
    if (!res.ok) throw new Error(data.zh || data.error);
    return data;
  };
}

function liveParams() {
  const p = {...params(), prompt: $("live_prompt").value};
  for (const key of LIVE) p[key] = Number($("live_" + key).value);
  p.top_k = p.top_k || null;                       // 0 = 不限
  const seed = $("live_seed").value.trim();
  p.seed = seed === "" ? null : Number(seed);
  return p;
}

// ---------------------------------------------------------------- 下一个字的分布
const askNext = latest(), askPoem = latest();

function drawBars(d) {
  const box = $("bars"), items = d.top.slice(0, BARS);
  const W = 640, H = 220, top = 22, bottom = 30, slot = W / items.length, bw = slot * 0.36;
  const peak = Math.max(...items.map((t) => Math.max(t.probs.model, t.probs.top_p)), 1e-9);
  const y = (p) => top + (H - top - bottom) * (1 - p / peak);
  box.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const parts = [svg("line", {x1: 0, x2: W, y1: H - bottom, y2: H - bottom, class: "axis"})];
  items.forEach((t, i) => {
    const x = i * slot + slot / 2, after = t.probs.top_p, before = t.probs.model;
    const label = `“${show(t.char)}”：原始 ${(before * 100).toFixed(1)}%，抽样 ${(after * 100).toFixed(1)}%`;
    const b = svg("rect", {x: x - bw, y: y(before), width: bw, height: H - bottom - y(before),
                           class: "before"});
    const a = svg("rect", {x, y: y(after), width: bw, height: H - bottom - y(after),
                           class: after > 0 ? "after" : "after dropped"});
    a.dataset.char = t.char;
    a.dataset.p = after;
    for (const r of [b, a]) r.append(svg("title", {}, label));
    parts.push(b, a, svg("text", {x, y: H - 8, class: after > 0 ? "char" : "char dropped"},
                         show(t.char)));
    if (after >= 0.005) {
      parts.push(svg("text", {x: x + bw / 2, y: y(after) - 4, class: "pct"},
                     (after * 100).toFixed(after >= 0.1 ? 0 : 1)));
    }
  });
  box.replaceChildren(...parts);
  const kept = d.kept, n = d.top.length;
  const steps = [`格式与惩罚之后 ${kept.rules} 个`, `top-k 之后 ${kept.top_k} 个`,
                 `top-p 之后 ${kept.top_p} 个`];
  $("live_summary").textContent = (d.greedy ? "温度 0 = 贪心：只剩概率最大的那个字。" : "") +
    `词表 ${kept.model} 个字：${steps.join(" → ")}可以被抽到。` +
    `前 ${n} 个之外的字合计：原始 ${(d.others.model * 100).toFixed(1)}%，` +
    `抽样 ${(d.others.top_p * 100).toFixed(1)}%。`;
  box.dataset.version = String(Number(box.dataset.version || 0) + 1);
}

async function refreshNext() {
  const p = liveParams();
  try {
    drawBars(await askNext("/api/next", {...p, top: BARS}));
  } catch (e) {
    if (e.name === "AbortError") return;
    $("live_summary").textContent = "出错了：" + e.message;
  }
}

async function refreshPoem() {
  const p = liveParams(), out = $("live_poem"), status = $("live_status");
  status.className = ""; status.textContent = "正在写……";
  try {
    const d = await askPoem("/api/generate", p);
    out.textContent = d.text.replace(/([。？！])/g, "$1\n").trim();
    out.dataset.text = d.text;
    status.textContent = `种子 ${p.seed ?? "随机"}：${d.new_chars} 个字，用时 ${d.seconds} 秒`;
  } catch (e) {
    if (e.name === "AbortError") return;
    status.className = "error"; status.textContent = "出错了：" + e.message;
  }
}

const refreshLive = debounce(() => { refreshNext(); refreshPoem(); }, 150);

// ---------------------------------------------------------------- 注意力
const askAttention = latest();
let attention = null;

function drawHeatmap() {
  const box = $("heatmap");
  if (!attention) { box.replaceChildren(); return; }
  const layer = Number($("attn_layer").value), head = Number($("attn_head").value);
  const w = attention.weights[layer][head], tokens = attention.tokens.map(show);
  const T = tokens.length, cell = Math.max(12, Math.min(32, Math.floor(560 / T)));
  const pad = 26, size = pad + T * cell;
  box.setAttribute("viewBox", `0 0 ${size + 4} ${size + 4}`);
  box.setAttribute("width", size + 4);
  const parts = [];
  tokens.forEach((ch, i) => {
    const c = pad + i * cell + cell / 2;
    parts.push(svg("text", {x: c, y: pad - 4, class: "tick"}, ch),
               svg("text", {x: pad - 5, y: c + 5, class: "tick row"}, ch));
  });
  w.forEach((row, q) => row.forEach((v, k) => {
    const r = svg("rect", {x: pad + k * cell, y: pad + q * cell, width: cell - 1, height: cell - 1,
                           class: k > q ? "future" : "cell", "fill-opacity": k > q ? 1 : v});
    r.append(svg("title", {}, k > q ? `“${tokens[q]}”看不到后面的“${tokens[k]}”`
                                    : `“${tokens[q]}”看“${tokens[k]}”：${v.toFixed(3)}`));
    parts.push(r);
  }));
  box.replaceChildren(...parts);
  box.dataset.version = String(Number(box.dataset.version || 0) + 1);
  $("attn_status").textContent = `第 ${layer + 1} 层 · 第 ${head + 1} 个头；行 = 查询，列 = 键。`;
}

async function refreshAttention() {
  try {
    attention = await askAttention("/api/attention", {text: $("attn_text").value});
    drawHeatmap();
  } catch (e) {
    if (e.name === "AbortError") return;
    attention = null; drawHeatmap();
    $("attn_status").textContent = "出错了：" + e.message;
  }
}

// ---------------------------------------------------------------- 开始
function options(select, n, name) {
  select.replaceChildren(...Array.from({length: n}, (_, i) => {
    const o = document.createElement("option");
    o.value = String(i); o.textContent = `第 ${i + 1} ${name}`;
    return o;
  }));
}

async function initLive() {
  // 滑块的范围与初始值来自服务器（/api/info 的 ranges、zero_ok、defaults），页面不写数值
  const info = await (await fetch("/api/info")).json();
  for (const key of LIVE) {
    const el = $("live_" + key);
    if (info.ranges[key]) {
      el.min = info.zero_ok.includes(key) ? 0 : info.ranges[key][0];
      el.max = info.ranges[key][1];
    }
    const v = info.defaults[key];
    el.value = v === null ? (key === "top_p" ? 1 : 0) : v;
    $("live_" + key + "_v").textContent = el.value;
    el.addEventListener("input", () => { $("live_" + key + "_v").textContent = el.value; refreshLive(); });
  }
  for (const id of ["live_prompt", "live_seed"]) $(id).addEventListener("input", refreshLive);
  for (const id of ["title", "form", "acrostic", "rhyme", "tones"]) {
    $(id).addEventListener("change", refreshLive);
  }
  options($("attn_layer"), info.n_layer, "层");
  options($("attn_head"), info.n_head, "个头");
  $("attn_text").maxLength = info.limits.attention;
  $("attn_text").addEventListener("input", debounce(refreshAttention, 250));
  for (const id of ["attn_layer", "attn_head"]) $(id).addEventListener("change", drawHeatmap);
  refreshLive();
  await refreshAttention();
  document.body.dataset.liveReady = "1";
}
initLive();
