// The page: sends the text box to the server's API and shows what comes back. Plain JavaScript and SVG, nothing
// loaded from elsewhere, so it works offline. Text from the model is only ever set as textContent (never as HTML).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
let info = null;        // GET /v1/info
let attention = null;   // the last POST /v1/attention answer

// A server of several language pairs lists them in info.pairs (each with its languages, decoding defaults and
// attention); the Languages choice picks one, and every request names it. A server of one model has no pairs.
const model = () => (info.pairs ? info.pairs[Number($("pair").value)] : info);
const pair = () => (info.pairs ? {source: model().languages.source, target: model().languages.target} : {});

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
// A line is a paragraph (the server splits it into sentences); another format sends the whole text as one
// document, whose translation comes back whole (markup or cue timings kept).
async function runTranslation(lines) {
  const beam = Number($("beam").value), nbest = Number($("nbest").value), format = $("format").value;
  $("document-out").hidden = true;
  if (format !== "text") {
    const result = await postJson("/v1/translate", {text: [$("source").value], beam, format, ...pair()});
    $("translations").replaceChildren();
    $("document-out").textContent = result.translations[0].text;
    $("document-out").hidden = false;
    $("translation-result").hidden = false;
    return;
  }
  const result = await postJson("/v1/translate", {text: lines, beam, nbest, ...pair()});
  showTranslations(result.translations);
  const first = result.translations[0];
  if (first) await showAttention(lines[0], first.text);
}

// The heatmap of one sentence and the model's output for it (where the server offers attention). A target longer
// than the server takes is left out: the server then recomputes it, the same output by the same defaults.
async function showAttention(text, target) {
  if (!model().attention) return;
  const body = target.length <= info.limits.max_chars ? {text, target} : {text};
  if (info.pairs) body.languages = pair();
  attention = await postJson("/v1/attention", body);
  fillSelect($("layer"), attention.layers, attention.layers - 1);
  fillSelect($("head"), attention.heads, 0);
  drawHeatmap();
  $("attention-result").hidden = false;
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

// ----------------------------------------------------------------------------------------------- parsing
async function runParsing(lines) {
  const result = await postJson("/v1/parse", {text: lines});
  const box = $("parse-trees");
  box.replaceChildren();
  result.trees.forEach((parsed, i) => box.append(treeFigure(lines[i], parsed, i)));
  $("parse-result").hidden = false;
  const first = result.trees[0];
  if (first && first.tree) await showAttention(lines[0], first.tree);
}

// One sentence's tree: the SVG drawing in a scrollable box (focusable, so the keyboard can scroll a wide tree),
// then the bracketed string as text, which screen readers get as the drawing's description.
function treeFigure(sentence, parsed, index) {
  const figure = element("figure", undefined, "parse");
  const code = element("code", parsed.tree || "(no tree: the line is empty)", "bracketed");
  code.id = `tree-text-${index}`;
  const caption = element("figcaption");
  caption.append(code);
  const root = readTree(parsed.tree);
  if (root) {
    const scroller = element("div", undefined, "tree-box");
    scroller.tabIndex = 0;
    scroller.setAttribute("role", "region");
    scroller.setAttribute("aria-label", `Tree ${index + 1} (scrolls sideways when wide)`);
    const svg = drawTree(root);
    svg.setAttribute("aria-label", `Parse tree of: ${sentence}`);
    svg.setAttribute("aria-describedby", code.id);
    scroller.append(svg);
    figure.append(scroller);
  }
  figure.append(caption);
  return figure;
}

// A one-line PTB tree -> {label, children} with words as {word} leaves (-LRB-/-RRB- shown as brackets again);
// null for "" (an empty line). The server only sends well-formed trees, so this reader does not check them.
function readTree(text) {
  const tokens = text.match(/\(|\)|[^\s()]+/g) || [];
  let pos = 0;
  function constituent() {
    pos++;  // "("
    const label = tokens[pos] !== "(" && tokens[pos] !== ")" ? tokens[pos++] : "";
    const children = [];
    while (pos < tokens.length && tokens[pos] !== ")") {
      if (tokens[pos] === "(") children.push(constituent());
      else children.push({word: tokens[pos++].replaceAll("-LRB-", "(").replaceAll("-RRB-", ")")});
    }
    pos++;  // ")"
    return {label, children};
  }
  return tokens[0] === "(" ? constituent() : null;
}

// Layout: each word gets a column as wide as it (or its tag) needs, left to right in sentence order; a
// constituent sits centred over its first and last child, one level per depth; words share the bottom row so
// the sentence reads across. Edges go from a label's foot to its child's head.
function layoutTree(root) {
  const charWidth = 8, gap = 14, level = 46;
  const nodes = [], words = [];
  let cursor = 10, deepest = 0;
  function place(node, depth, parentLabel) {
    if (node.word !== undefined) {
      const width = charWidth * Math.max(node.word.length, parentLabel.length, 1);
      node.x = cursor + width / 2;
      cursor += width + gap;
      words.push(node);
      return;
    }
    deepest = Math.max(deepest, depth);
    node.children.forEach((child) => place(child, depth + 1, node.label));
    node.x = (node.children[0].x + node.children[node.children.length - 1].x) / 2;
    node.y = 22 + depth * level;
    nodes.push(node);
  }
  place(root, 0, "");
  for (const word of words) word.y = 22 + (deepest + 1) * level;
  return {nodes, words, width: cursor - gap + 10, height: 22 + (deepest + 1) * level + 16};
}

function drawTree(root) {
  const {nodes, words, width, height} = layoutTree(root);
  const svg = svgNode("svg", {width, height, role: "img", class: "tree"});
  for (const node of nodes) {
    for (const child of node.children) {
      svg.append(svgNode("line", {x1: node.x, y1: node.y + 6, x2: child.x, y2: child.y - 14, class: "tree-edge"}));
    }
  }
  for (const node of nodes) {
    const className = node === root ? "tree-label root" : "tree-label";
    svg.append(svgNode("text", {x: node.x, y: node.y, "text-anchor": "middle", class: className}, node.label));
  }
  for (const word of words) {
    svg.append(svgNode("text", {x: word.x, y: word.y, "text-anchor": "middle", class: "tree-word"}, word.word));
  }
  svg.dataset.words = String(words.length);
  return svg;
}

// ----------------------------------------------------------------------------------------------- tasks
// What each task's page does: its button, the label of its text box, and how it runs and shows a request.
// `help` replaces the text box's hint where the task needs its own; `rows` names the heatmap's rows.
const RENDERERS = {
  translation: {button: "Translate", label: "Text to translate", run: runTranslation, options: true,
                rows: "the translation",
                help: "One paragraph per line (split into sentences), or a whole document: choose its format " +
                      "under Decoding. Enter translates; Shift+Enter starts a new line."},
  classification: {button: "Classify", label: "Text to classify", run: runClassification, options: false},
  parsing: {button: "Parse", label: "Sentence to parse", run: runParsing, options: false,
            rows: "the tree's brackets, labels and tags",
            help: "One sentence per line, words separated by spaces, punctuation as its own word " +
                  "(The dog barks .). Enter parses; Shift+Enter starts a new line."},
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
  const parts = [`${info.task} model`, `engine ${info.engine}`], chosen = model();
  if (chosen.languages) parts.push(`${chosen.languages.source} → ${chosen.languages.target}`);
  if (chosen.parameters) parts.push(`${chosen.parameters.toLocaleString("en")} parameters`);
  return parts.join(" · ");
}

function showPairs() {
  info.pairs.forEach((p, i) => {
    const option = element("option", `${p.languages.source} → ${p.languages.target}`);
    option.value = String(i);
    $("pair").append(option);
  });
  $("pair").addEventListener("change", () => {
    $("model-info").textContent = describe(info);
    $("beam").value = model().decode_defaults.beam;
  });
  $("pair-choice").hidden = false;
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
  if (info.pairs) showPairs();
  $("model-info").textContent = describe(info);
  const renderer = RENDERERS[info.task];
  if (!renderer) {
    setStatus(`This page cannot show ${info.task} yet; use the API (/docs).`, true);
    return;
  }
  $("run").textContent = renderer.button;
  $("source-label").textContent = renderer.label;
  if (renderer.help) $("input-help").textContent = renderer.help;
  if (renderer.rows) $("attention-rows").textContent = renderer.rows;
  if (renderer.options && model().decode_defaults) {
    $("beam").value = model().decode_defaults.beam;
    $("beam").max = info.limits.max_beam;
    $("decode-options").hidden = false;
  }
  document.body.dataset.ready = "true";
}

init();
