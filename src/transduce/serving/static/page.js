// The page: sends the text box to the server's API and shows what comes back. Plain JavaScript and SVG, nothing
// loaded from elsewhere, so it works offline. Text from the model is only ever set as textContent (never as HTML).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
let info = null;        // GET /v1/info
let attention = null;   // the last POST /v1/attention answer

async function postJson(url, body) {
  const response = await fetch(url, {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = data.error ? data.error.message : `HTTP ${response.status}`;
    throw new Error(message);
  }
  return data;
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

// ----------------------------------------------------------------------------------------------- translation
async function runTranslation(lines) {
  const beam = Number($("beam").value), nbest = Number($("nbest").value);
  const result = await postJson("/v1/translate", {text: lines, beam, nbest});
  showTranslations(result.translations);
  const first = result.translations[0];
  if (info.attention && first) {
    attention = await postJson("/v1/attention", {text: lines[0], target: first.text});
    fillSelect($("layer"), attention.layers, attention.layers - 1);
    fillSelect($("head"), attention.heads, 0);
    drawHeatmap();
    $("attention-result").hidden = false;
  }
}

function showTranslations(translations) {
  const list = $("translations");
  list.replaceChildren();
  for (const t of translations) {
    const item = element("li");
    item.append(element("span", t.text, "translation"), element("span", `score ${t.score.toFixed(3)}`, "score"));
    if (t.nbest && t.nbest.length > 1) {
      const alternatives = element("ol", undefined, "nbest");
      for (const h of t.nbest) {
        const alt = element("li", h.text);
        alt.append(element("span", `score ${h.score.toFixed(3)}`, "hyp-score"));
        alternatives.append(alt);
      }
      item.append(alternatives);
    }
    list.append(item);
  }
  $("translation-result").hidden = false;
}

function fillSelect(select, count, chosen) {
  select.replaceChildren();
  for (let i = 0; i < count; i++) {
    const option = element("option", String(i + 1));
    option.value = String(i);
    select.append(option);
  }
  select.value = String(chosen);
}

function svgNode(tag, attributes, text) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

// Attention 0 -> white, 1 -> the accent blue.
function shade(value) {
  const mix = (from, to) => Math.round(from + (to - from) * Math.min(1, Math.max(0, value)));
  return `rgb(${mix(255, 29)}, ${mix(255, 78)}, ${mix(255, 216)})`;
}

// One cell per (target piece, source piece); source pieces label the columns (rotated), target pieces the rows.
function drawHeatmap() {
  const layer = Number($("layer").value), head = Number($("head").value);
  const rows = attention.target_pieces, cols = attention.source_pieces;
  const weights = attention.cross[layer][head];
  const cell = 26, charWidth = 7.5;
  const left = 12 + charWidth * Math.max(...rows.map((p) => p.length));
  const top = 12 + charWidth * Math.max(...cols.map((p) => p.length));
  const svg = $("heatmap");
  svg.replaceChildren();
  svg.setAttribute("width", String(left + cell * cols.length + 4));
  svg.setAttribute("height", String(top + cell * rows.length + 4));
  svg.dataset.rows = String(rows.length);
  svg.dataset.cols = String(cols.length);
  svg.setAttribute("aria-label", `Cross-attention, layer ${layer + 1}, head ${head + 1}: ` +
    `${rows.length} target pieces by ${cols.length} source pieces`);
  cols.forEach((piece, j) => {
    const x = left + j * cell + cell / 2, y = top - 6;
    svg.append(svgNode("text", {x, y, transform: `rotate(-90 ${x} ${y})`, "dominant-baseline": "middle",
                                 class: "source-piece"}, piece));
  });
  rows.forEach((piece, i) => {
    svg.append(svgNode("text", {x: left - 6, y: top + i * cell + cell / 2, "text-anchor": "end",
                                 "dominant-baseline": "middle", class: "target-piece"}, piece));
    cols.forEach((source, j) => {
      const value = weights[i][j];
      const rect = svgNode("rect", {x: left + j * cell, y: top + i * cell, width: cell, height: cell,
                                    fill: shade(value), class: "cell"});
      rect.append(svgNode("title", {}, `${piece} → ${source}: ${value.toFixed(3)}`));
      svg.append(rect);
    });
  });
}

// ----------------------------------------------------------------------------------------------- classification
async function runClassification(lines) {
  const result = await postJson("/v1/classify", {text: lines});
  const box = $("predictions");
  box.replaceChildren();
  result.predictions.forEach((prediction, i) => {
    const table = element("table", undefined, "probabilities");
    table.append(element("caption", `${lines[i]} → ${prediction.label}`));
    const sorted = Object.entries(prediction.probabilities).sort((a, b) => b[1] - a[1]);
    for (const [label, p] of sorted) {
      const row = element("tr");
      const bar = element("span", undefined, "bar");
      bar.style.width = `${Math.round(p * 200)}px`;
      const barCell = element("td");
      barCell.append(bar);
      row.append(element("th", label), element("td", p.toFixed(3)), barCell);
      table.append(row);
    }
    box.append(table);
  });
  $("classification-result").hidden = false;
}

// ----------------------------------------------------------------------------------------------- tasks
// What each task's page does: its button, the label of its text box, and how it runs and shows a request.
// A parsing run adds an entry here whose `run` posts to /v1/parse and draws the tree as SVG.
const RENDERERS = {
  translation: {button: "Translate", label: "Text to translate", run: runTranslation, options: true},
  classification: {button: "Classify", label: "Text to classify", run: runClassification, options: false},
};

async function onSubmit(event) {
  event.preventDefault();
  const lines = $("source").value.split("\n").map((l) => l.trim()).filter((l) => l.length > 0);
  const renderer = info && RENDERERS[info.task];
  if (!renderer || lines.length === 0) return;
  $("run").disabled = true;
  setStatus("Working…");
  try {
    await renderer.run(lines);
    setStatus("Done.");
  } catch (error) {
    setStatus(error.message, true);
  } finally {
    $("run").disabled = false;
  }
}

function onKeyDown(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("input-form").requestSubmit();
  }
}

function describe(info) {
  const parts = [`${info.task} model`, `engine ${info.engine}`];
  if (info.languages) parts.push(`${info.languages.source} → ${info.languages.target}`);
  if (info.parameters) parts.push(`${info.parameters.toLocaleString("en")} parameters`);
  return parts.join(" · ");
}

async function init() {
  $("input-form").addEventListener("submit", onSubmit);
  $("source").addEventListener("keydown", onKeyDown);
  $("layer").addEventListener("change", drawHeatmap);
  $("head").addEventListener("change", drawHeatmap);
  try {
    info = await (await fetch("/v1/info")).json();
  } catch (error) {
    setStatus(`Cannot reach the server: ${error.message}`, true);
    return;
  }
  $("model-info").textContent = describe(info);
  const renderer = RENDERERS[info.task];
  if (!renderer) {
    setStatus(`This page cannot show ${info.task} yet; use the API (/docs).`, true);
    return;
  }
  $("run").textContent = renderer.button;
  $("source-label").textContent = renderer.label;
  if (renderer.options && info.decode_defaults) {
    $("beam").value = info.decode_defaults.beam;
    $("beam").max = info.limits.max_beam;
    $("decode-options").hidden = false;
  }
  document.body.dataset.ready = "true";
}

init();
