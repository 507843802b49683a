/*
 * vllm-fleet web chat ("网页推理"): a static page the router serves beside the models' endpoints.
 *
 * No build step and no third-party JavaScript, on purpose:
 *  - the Markdown renderer below is our own: it builds DOM nodes with createElement/textContent
 *    only and never parses HTML, so nothing a model writes (or a stored conversation holds) can
 *    run as script or load anything;
 *  - router hosts are often air-gapped: there are no assets to fetch, pin or mirror.
 * Nothing here uses innerHTML, outerHTML, insertAdjacentHTML, document.write, eval or
 * new Function. Every URL is relative to the page (config.json's paths too), so the page works
 * under any prefix and calls no host but its own origin (index.html's CSP enforces it as well).
 *
 * The team key lives in sessionStorage only (gone with the tab); conversations are kept in
 * localStorage, messages only, never the key.
 *
 * It reads ./config.json (paths relative to the page):
 *   {"title": "vllm-fleet", "currency": "CNY", "presets": ["写一封辞职信", ...],
 *    "fleet_refresh_seconds": 5,                      (optional, at least 1)
 *    "models": [{"name": "qwen3-8b", "version": "Qwen/Qwen3-8B@<revision>", "path": "models/qwen3-8b",
 *                "price_input_per_1k": 0.002, "price_output_per_1k": 0.006,
 *                "replicas": [{"node": "nvidia-01", "metrics": "fleet/nvidia-01/qwen3-8b/metrics",
 *                              "node_metrics": "fleet/nvidia-01/node/metrics"}]}]}
 * {path}/v1/models and {path}/v1/chat/completions are the model's OpenAI endpoints; a reply's
 * node is the response header X-Vllm-Fleet-Node when the router sets it.
 */
(() => {
  'use strict';

  const STORE_CHATS = 'vllm-fleet.chat.conversations';
  const STORE_CURRENT = 'vllm-fleet.chat.current';
  const STORE_MODEL = 'vllm-fleet.chat.model';
  const STORE_SYSTEM = 'vllm-fleet.chat.system';
  const SESSION_KEY = 'vllm-fleet.chat.key'; // sessionStorage, never localStorage
  const MAX_CHATS = 50;
  const FLEET_REFRESH_MS = 5000;
  const DEFAULT_MAX_TOKENS = 512;
  const DEFAULT_PRESETS = ['写一封辞职信', '生成Python函数注释'];
  const NODE_HEADER = 'X-Vllm-Fleet-Node';
  const MSG_401 = 'the key was refused (401): ask your platform team for a team key';
  const MSG_429 = "rate limit of your team's key reached (429)";

  const $ = (id) => document.getElementById(id);

  /** An element with a class and text; children are nodes or strings (strings become text nodes). */
  function el(tag, cls, text, ...children) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null && text !== '') e.textContent = String(text);
    for (const c of children) if (c != null) e.append(c);
    return e;
  }

  const state = {
    config: null,
    models: [], // per configured model: {cfg, served: [{id, maxModelLen}], error}
    options: [], // the picker's entries: {model, id, maxModelLen}
    chats: [],
    current: null, // id of the open conversation
    streaming: null, // {ctrl, view, ...} while a reply streams
    fleetPrev: new Map(), // metrics path -> {t, tokens}: for generation tokens/s
    fleetBusy: false,
  };

  // ---------------------------------------------------------------- URLs, key, errors

  /** A URL on this page's origin: `path` (from config.json, relative to the page) + `suffix`. */
  function pageUrl(path, suffix = '') {
    let p = String(path ?? '').replace(/\/+$/, '');
    if (suffix) p = (p ? `${p}/` : '') + suffix.replace(/^\/+/, '');
    const url = new URL(p || '.', document.baseURI);
    if (url.origin !== window.location.origin) throw new Error(`${path}: not on this page's origin`);
    return url.pathname + url.search;
  }

  const key = {
    get: () => sessionStorage.getItem(SESSION_KEY) || '',
    set: (v) => sessionStorage.setItem(SESSION_KEY, v),
    clear: () => sessionStorage.removeItem(SESSION_KEY),
  };

  function authHeaders(extra = {}) {
    const h = { ...extra };
    const k = key.get();
    if (k) h.Authorization = `Bearer ${k}`;
    return h;
  }

  function serverMessage(text) {
    try {
      const j = JSON.parse(text);
      const m = j?.error?.message ?? j?.error ?? j?.message ?? j?.detail;
      if (m != null) return typeof m === 'string' ? m : JSON.stringify(m);
    } catch (_) { /* not JSON: the text itself */ }
    return String(text).trim().slice(0, 500);
  }

  /** The message a failed response shows (always as text). */
  async function httpError(resp) {
    if (resp.status === 401) return MSG_401;
    if (resp.status === 429) return MSG_429;
    let detail = '';
    try { detail = serverMessage(await resp.text()); } catch (_) { /* no body */ }
    return `${resp.status} ${resp.statusText || ''}`.trim() + (detail ? `: ${detail}` : '');
  }

  function showError(text) {
    const box = $('error');
    box.textContent = text;
    box.hidden = !text;
  }

  // ---------------------------------------------------------------- storage

  function str(v) { return typeof v === 'string' ? v : ''; }

  /** A stored conversation, kept only as plain strings and numbers (whatever localStorage holds). */
  function cleanChat(c) {
    if (!c || typeof c !== 'object' || typeof c.id !== 'string' || !Array.isArray(c.messages)) return null;
    const messages = c.messages
      .filter((m) => m && ['user', 'assistant', 'system'].includes(m.role))
      .map((m) => ({
        role: m.role, content: str(m.content), reasoning: str(m.reasoning), model: str(m.model),
        error: str(m.error), notice: str(m.notice), stopped: m.stopped === true,
        stats: m.stats && typeof m.stats === 'object' ? m.stats : null,
      }));
    return { id: c.id, title: str(c.title), system: str(c.system), updated: Number(c.updated) || 0, messages };
  }

  function loadChats() {
    try {
      const v = JSON.parse(localStorage.getItem(STORE_CHATS) || '[]');
      return Array.isArray(v) ? v.map(cleanChat).filter(Boolean) : [];
    } catch (_) { return []; }
  }

  function saveChats() {
    state.chats.sort((a, b) => b.updated - a.updated);
    state.chats = state.chats.slice(0, MAX_CHATS);
    try {
      localStorage.setItem(STORE_CHATS, JSON.stringify(state.chats));
      if (state.current) localStorage.setItem(STORE_CURRENT, state.current);
      else localStorage.removeItem(STORE_CURRENT);
    } catch (e) { showError(`history not saved: ${e.message}`); }
  }

  function currentChat(create) {
    let chat = state.chats.find((c) => c.id === state.current) || null;
    if (!chat && create) {
      const id = `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`;
      chat = { id, title: '', system: '', updated: Date.now(), messages: [] };
      state.chats.unshift(chat);
      state.current = id;
    }
    return chat;
  }

  // ---------------------------------------------------------------- Markdown, as DOM nodes

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)/;
  const CLOSE_FENCE = /^ {0,3}(`{3,}|~{3,})\s*$/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}>\s?(.*)$/;
  const UL = /^( *)([-*+])\s+(.*)$/;
  const OL = /^( *)(\d{1,9})[.)]\s+(.*)$/;
  const TABLE_SEP = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

  function isBlockStart(line) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)
      || UL.test(line) || OL.test(line);
  }

  function tableCells(line) {
    let s = line.trim();
    if (s.startsWith('|')) s = s.slice(1);
    if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
    return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
  }

  /** Markdown to a DocumentFragment: text nodes and a fixed set of elements, nothing parsed as HTML. */
  function renderMarkdown(src) {
    const frag = document.createDocumentFragment();
    const lines = String(src).replace(/\r\n?/g, '\n').split('\n');
    let para = [];
    const flush = () => {
      if (!para.length) return;
      const p = el('p');
      para.forEach((l, k) => { if (k) p.append(el('br')); appendInline(p, l); });
      frag.append(p);
      para = [];
    };
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if ((m = FENCE.exec(line))) { // fenced code; an unclosed one (still streaming) runs to the end
        flush();
        const fence = m[1];
        const lang = m[2].replace(/[^\w+#.-]/g, '');
        const code = [];
        for (i++; i < lines.length; i++) {
          const c = CLOSE_FENCE.exec(lines[i]);
          if (c && c[1][0] === fence[0] && c[1].length >= fence.length) { i++; break; }
          code.push(lines[i]);
        }
        const codeEl = el('code', lang ? `language-${lang}` : '', code.join('\n'));
        frag.append(el('div', 'code-block', null, el('div', 'code-lang', lang || 'text'), el('pre', null, null, codeEl)));
        continue;
      }
      if (!line.trim()) { flush(); i++; continue; }
      if ((m = HEADING.exec(line))) {
        flush();
        const h = el(`h${Math.min(6, m[1].length + 2)}`, 'md-heading');
        appendInline(h, m[2]);
        frag.append(h);
        i++;
        continue;
      }
      if (RULE.test(line)) { flush(); frag.append(el('hr')); i++; continue; }
      if (QUOTE.test(line)) {
        flush();
        const inner = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) { inner.push(m[1]); i++; }
        frag.append(el('blockquote', null, null, renderMarkdown(inner.join('\n'))));
        continue;
      }
      if (UL.test(line) || OL.test(line)) {
        flush();
        i = renderList(lines, i, frag);
        continue;
      }
      if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1])) {
        flush();
        const table = el('table', 'md-table');
        const head = el('tr');
        for (const c of tableCells(line)) { const th = el('th'); appendInline(th, c); head.append(th); }
        table.append(el('thead', null, null, head));
        const body = el('tbody');
        for (i += 2; i < lines.length && lines[i].includes('|') && lines[i].trim(); i++) {
          const tr = el('tr');
          for (const c of tableCells(lines[i])) { const td = el('td'); appendInline(td, c); tr.append(td); }
          body.append(tr);
        }
        table.append(body);
        frag.append(el('div', 'table-wrap', null, table));
        continue;
      }
      if (para.length && isBlockStart(line)) flush();
      para.push(line);
      i++;
    }
    flush();
    return frag;
  }

  /** A bullet or numbered list from lines[i]; returns the index after it. Items may hold
   * indented lines (nested lists, code), rendered as Markdown of their own. */
  function renderList(lines, i, frag) {
    const ordered = !UL.test(lines[i]);
    const re = ordered ? OL : UL;
    const first = re.exec(lines[i]);
    const base = first[1].length;
    const list = el(ordered ? 'ol' : 'ul', 'md-list');
    if (ordered && first[2] !== '1') list.start = Number(first[2]);
    while (i < lines.length) {
      const m = re.exec(lines[i]);
      if (!m || m[1].length > base + 1) break;
      const width = m[0].length - m[3].length; // where the item's text starts
      const content = [m[3]];
      for (i++; i < lines.length; i++) {
        const l = lines[i];
        if (!l.trim()) {
          const next = lines[i + 1];
          if (next !== undefined && (next.match(/^ */)[0].length > base || re.test(next))) { content.push(''); continue; }
          break;
        }
        const indent = l.match(/^ */)[0].length;
        if (indent > base && !(re.test(l) && indent <= base + 1)) { content.push(l.slice(Math.min(indent, width))); continue; }
        break;
      }
      while (content.length && !content[content.length - 1].trim()) content.pop();
      const li = el('li');
      if (content.length === 1) appendInline(li, content[0]);
      else li.append(renderMarkdown(content.join('\n')));
      list.append(li);
      if (i < lines.length && !lines[i].trim()) break;
    }
    frag.append(list);
    return i;
  }

  /** The closing emphasis mark after `from`: not after a space, a lone `*`/`_` not part of a pair. */
  function findClose(text, mark, from) {
    for (let j = text.indexOf(mark, from); j >= 0; j = text.indexOf(mark, j + 1)) {
      if (j === from || /\s/.test(text[j - 1])) continue;
      if (mark.length === 1 && (text[j + 1] === mark || text[j - 1] === mark)) continue;
      if (mark[0] === '_' && /\w/.test(text[j + mark.length] || '')) continue;
      return j;
    }
    return -1;
  }

  const LINK = /^\[([^\]\n]*)\]\(\s*<?([^\s<>()]*(?:\([^\s()]*\)[^\s<>()]*)*)>?(?:\s+"[^"\n]*")?\s*\)/;

  /** Inline Markdown (code, bold, italic, links) appended to `parent` as nodes. */
  function appendInline(parent, text) {
    let buf = '';
    const flush = () => { if (buf) { parent.append(buf); buf = ''; } };
    let i = 0;
    while (i < text.length) {
      const c = text[i];
      if (c === '\\' && /[\\`*_[\]()#+\-.!~|<>]/.test(text[i + 1] || '')) { buf += text[i + 1]; i += 2; continue; }
      if (c === '`') {
        const run = /^`+/.exec(text.slice(i))[0];
        const end = text.indexOf(run, i + run.length);
        if (end > 0) {
          flush();
          const code = text.slice(i + run.length, end);
          parent.append(el('code', 'md-code', code.length > 2 && code.startsWith(' ') && code.endsWith(' ') ? code.slice(1, -1) : code));
          i = end + run.length;
          continue;
        }
        buf += run; i += run.length; continue;
      }
      if (c === '*' || c === '_') {
        const mark = text[i + 1] === c ? c + c : c;
        const next = text[i + mark.length];
        const opens = next && !/\s/.test(next) && !(c === '_' && /\w/.test(text[i - 1] || ''));
        const end = opens ? findClose(text, mark, i + mark.length) : -1;
        if (end > 0) {
          flush();
          const node = el(mark.length === 2 ? 'strong' : 'em');
          appendInline(node, text.slice(i + mark.length, end));
          parent.append(node);
          i = end + mark.length;
          continue;
        }
        buf += mark; i += mark.length; continue;
      }
      if (c === '[') {
        const m = LINK.exec(text.slice(i));
        if (m) {
          flush();
          const url = m[2];
          if (/^https?:\/\/[^\s]+$/i.test(url)) { // only http(s); anything else stays literal text
            const a = el('a', 'md-link');
            a.href = url;
            a.title = url;
            a.rel = 'noopener noreferrer';
            a.target = '_blank';
            appendInline(a, m[1] || url);
            parent.append(a);
          } else {
            parent.append(m[0]);
          }
          i += m[0].length;
          continue;
        }
      }
      buf += c;
      i++;
    }
    flush();
  }

  // ---------------------------------------------------------------- context trimming

  /* Tokens are estimated as ceil(chars / 3), plus 4 a message for the chat template's markers:
   * there is no tokenizer in the browser. ~3 characters a token is on the safe side for English
   * (about 4) but under for Chinese (1 to 1.5 characters a token); a prompt the estimate lets
   * through that is still too long is refused by the server with a 400, shown as its message. */
  function estimateTokens(text) { return Math.ceil(String(text).length / 3) + 4; }

  /** The messages to send: the system prompt (if any) and the newest turns whose estimate plus the
   * reply budget fits max_model_len; `dropped` counts the earlier ones left out. */
  function fitContext(system, history, maxModelLen, replyBudget) {
    const usable = history.filter((m) => (m.role === 'user' || m.role === 'assistant') && !m.error && m.content);
    const sys = system && system.trim() ? [{ role: 'system', content: system }] : [];
    if (!maxModelLen) return { messages: [...sys, ...usable.map(pick)], dropped: 0 };
    let budget = maxModelLen - replyBudget - sys.reduce((n, m) => n + estimateTokens(m.content), 0);
    const kept = [];
    for (let k = usable.length - 1; k >= 0; k--) {
      const cost = estimateTokens(usable[k].content);
      if (kept.length && cost > budget) break; // the newest message is always sent
      budget -= cost;
      kept.unshift(usable[k]);
    }
    while (kept.length > 1 && kept[0].role !== 'user') kept.shift(); // a conversation starts with the user
    return { messages: [...sys, ...kept.map(pick)], dropped: usable.length - kept.length };
    function pick(m) { return { role: m.role, content: m.content }; }
  }

  // ---------------------------------------------------------------- models

  function modelPrices(cfg) {
    const pin = Number(cfg.price_input_per_1k);
    const pout = Number(cfg.price_output_per_1k);
    return Number.isFinite(pin) && Number.isFinite(pout) ? { pin, pout } : null;
  }

  async function loadModels() {
    const cfgs = state.config.models;
    const errors = [];
    state.models = await Promise.all(cfgs.map(async (cfg) => {
      const m = { cfg, served: [], error: '' };
      if (!key.get()) { m.error = 'no key yet'; return m; }
      try {
        const resp = await fetch(pageUrl(cfg.path, 'v1/models'),
          { headers: authHeaders({ Accept: 'application/json' }), cache: 'no-store' });
        if (!resp.ok) {
          m.error = await httpError(resp);
          errors.push(m.error);
          return m;
        }
        const j = await resp.json();
        for (const d of (j && Array.isArray(j.data) ? j.data : [])) {
          if (typeof d.id !== 'string') continue;
          const len = Number(d.max_model_len);
          m.served.push({ id: d.id, maxModelLen: Number.isFinite(len) && len > 0 ? len : null });
        }
      } catch (e) {
        m.error = `could not reach ${cfg.name}: ${e.message}`;
        errors.push(m.error);
      }
      return m;
    }));
    showError(errors[0] || '');
    renderPicker();
  }

  function renderPicker() {
    const select = $('model');
    const cur = selectedOption();
    const wanted = localStorage.getItem(STORE_MODEL) || (cur ? `${cur.model.cfg.name}/${cur.id}` : '');
    state.options = [];
    select.replaceChildren();
    state.models.forEach((m) => {
      const version = m.cfg.version ? ` · ${m.cfg.version}` : '';
      const entries = m.served.length ? m.served : [{ id: m.cfg.name, maxModelLen: null, unconfirmed: true }];
      for (const s of entries) {
        const value = String(state.options.length);
        state.options.push({ model: m, id: s.id, maxModelLen: s.maxModelLen });
        const label = `${s.id}${version}${s.unconfirmed ? ` (${m.error || 'not listed'})` : ''}`;
        const opt = el('option', null, label);
        opt.value = value;
        opt.dataset.id = s.id;
        select.append(opt);
      }
    });
    const again = state.options.findIndex((o) => `${o.model.cfg.name}/${o.id}` === wanted);
    if (again >= 0) select.value = String(again);
    renderModelInfo();
  }

  function selectedOption() { return state.options[Number($('model').value)] || null; }

  function renderModelInfo() {
    const box = $('model-info');
    const o = selectedOption();
    if (!o) { box.replaceChildren(el('span', 'muted', 'No model configured.')); return; }
    const cfg = o.model.cfg;
    const parts = [el('span', 'model-name', o.id), el('span', 'model-version', cfg.version || '(version unknown)')];
    if (o.maxModelLen) parts.push(el('span', 'muted', `context ${o.maxModelLen} tokens`));
    const prices = modelPrices(cfg);
    if (prices) {
      parts.push(el('span', 'muted', `${state.config.currency} ${prices.pin} in / ${prices.pout} out per 1k tokens`));
    }
    if (o.model.error && !o.model.served.length) parts.push(el('span', 'warn', o.model.error));
    box.replaceChildren(...parts);
  }

  // ---------------------------------------------------------------- conversation view

  function fmtNum(n, digits = 1) { return Number.isFinite(n) ? n.toFixed(digits) : '—'; }

  /** A cost with about three significant digits (0.000234 CNY), in the currency of the reply. */
  function fmtCost(cost, currency) {
    if (!Number.isFinite(cost)) return '—';
    const digits = cost === 0 ? 0 : cost >= 1 ? 2 : Math.min(8, 2 - Math.floor(Math.log10(cost)));
    return `${cost.toFixed(digits)} ${str(currency)}`.trim();
  }

  function statParts(s) {
    return [
      ['ttft', `TTFT ${Number.isFinite(s.ttft_ms) ? Math.round(s.ttft_ms) : '—'} ms`],
      ['tokens', `${s.completion_tokens ?? '—'} tokens${s.counted ? ' (counted)' : ''}`],
      ['tps', `${fmtNum(s.tps)} tok/s`],
      ['cost', `≈ ${fmtCost(s.cost, s.currency)}${s.prompt_estimated ? ' (prompt estimated)' : ''}`],
      ['node', `node ${s.node || '—'}`],
    ];
  }

  function messageView(msg, isLast) {
    const root = el('div', `msg msg-${msg.role}`);
    root.dataset.role = msg.role;
    const who = msg.role === 'user' ? 'You' : msg.role === 'system' ? 'System' : (msg.model || 'assistant');
    const reasoning = el('details', 'reasoning', null, el('summary', null, 'Reasoning'));
    const reasoningBody = el('div', 'reasoning-body');
    reasoning.append(reasoningBody);
    const body = el('div', 'msg-body');
    const meta = el('div', 'msg-meta');
    root.append(el('div', 'msg-role', who), reasoning, body, meta);
    const view = { root, reasoning, reasoningBody, body, meta, msg, isLast };
    updateView(view);
    return view;
  }

  function updateView(view) {
    const { msg } = view;
    view.reasoning.hidden = !msg.reasoning;
    if (msg.reasoning) view.reasoningBody.replaceChildren(renderMarkdown(msg.reasoning));
    if (msg.role === 'assistant') view.body.replaceChildren(renderMarkdown(msg.content));
    else view.body.replaceChildren(el('div', 'plain', msg.content));
    const meta = [];
    if (msg.role === 'assistant') {
      let st = 'done';
      if (view.live) st = 'streaming';
      else if (msg.error) st = 'error';
      else if (msg.stopped) st = 'stopped';
      view.root.dataset.state = st;
      if (msg.notice) meta.push(el('span', 'stat-notice', msg.notice));
      if (msg.stopped) meta.push(el('span', 'stat-stopped', 'stopped'));
      if (msg.error) meta.push(el('span', 'stat-error', msg.error));
      if (msg.stats) {
        for (const [k, text] of statParts(msg.stats)) {
          const s = el('span', `stat stat-${k}`, text);
          s.dataset.stat = k;
          meta.push(s);
        }
      }
      if (!view.live) {
        const copy = el('button', 'link-button', 'Copy');
        copy.type = 'button';
        copy.addEventListener('click', () => copyText(msg.content, view.body, copy));
        meta.push(copy);
        if (view.isLast) {
          const again = el('button', 'link-button regenerate', 'Regenerate');
          again.type = 'button';
          again.addEventListener('click', regenerate);
          meta.push(again);
        }
      }
    }
    view.meta.replaceChildren(...meta);
  }

  async function copyText(text, node, button) {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = 'Copied';
    } catch (_) { // no clipboard API off a secure context: select it for Ctrl+C
      const range = document.createRange();
      range.selectNodeContents(node);
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      button.textContent = 'Selected: Ctrl+C';
    }
    setTimeout(() => { button.textContent = 'Copy'; }, 2000);
  }

  function renderChat() {
    const chat = currentChat(false);
    const box = $('messages');
    const views = [];
    if (!chat || !chat.messages.length) {
      box.replaceChildren(el('div', 'empty muted', 'Pick a model, enter your team key, and ask something — or start from a preset below.'));
    } else {
      const lastAssistant = chat.messages.map((m) => m.role).lastIndexOf('assistant');
      chat.messages.forEach((m, k) => views.push(messageView(m, k === lastAssistant && k === chat.messages.length - 1)));
      box.replaceChildren(...views.map((v) => v.root));
      box.scrollTop = box.scrollHeight;
    }
    $('system').value = chat ? chat.system : (localStorage.getItem(STORE_SYSTEM) || '');
    renderHistory();
    return views;
  }

  function renderHistory() {
    const list = $('history');
    list.replaceChildren(...state.chats.filter((c) => c.messages.length).map((c) => {
      const open = el('button', 'history-open', c.title || '(untitled)');
      open.type = 'button';
      open.title = new Date(c.updated).toLocaleString();
      open.addEventListener('click', () => {
        if (state.streaming) return;
        state.current = c.id;
        saveChats();
        $('context-notice').hidden = true;
        renderChat();
      });
      const del = el('button', 'history-delete', '×');
      del.type = 'button';
      del.title = 'delete this conversation';
      del.addEventListener('click', () => {
        if (state.streaming) return;
        state.chats = state.chats.filter((x) => x.id !== c.id);
        if (state.current === c.id) state.current = null;
        saveChats();
        renderChat();
      });
      const li = el('li', c.id === state.current ? 'current' : '', null, open, del);
      li.dataset.chat = c.id;
      return li;
    }));
  }

  // ---------------------------------------------------------------- streaming a reply

  function setBusy(busy) {
    $('send').disabled = busy;
    $('stop').disabled = !busy;
    $('live').hidden = !busy;
  }

  function readMaxTokens() {
    const n = Number($('max-tokens').value);
    return Number.isInteger(n) && n > 0 ? n : DEFAULT_MAX_TOKENS;
  }

  /** tokens/s of the decoding: tokens after the first, over the time since the first. */
  function tokensPerSecond(tokens, tFirst, tNow) {
    if (tFirst == null || tokens < 2 || tNow <= tFirst) return NaN;
    return (tokens - 1) / ((tNow - tFirst) / 1000);
  }

  function liveLine() {
    const s = state.streaming;
    if (!s) return;
    const now = performance.now();
    const elapsed = `${((now - s.t0) / 1000).toFixed(1)} s`;
    $('live').textContent = s.tFirst == null
      ? `processing prompt… ${elapsed}`
      : `${s.chunks} tokens · ${fmtNum(tokensPerSecond(s.chunks, s.tFirst, now))} tok/s · ${elapsed}`;
  }

  async function send(text) {
    if (state.streaming) return;
    showError('');
    const opt = selectedOption();
    if (!opt) { showError('no model to send to: check config.json'); return; }
    if (!key.get()) { showError('enter your team key first'); $('key').focus(); return; }
    const chat = currentChat(true);
    if (text != null) {
      chat.messages.push({ role: 'user', content: text });
      if (!chat.title) chat.title = text.replace(/\s+/g, ' ').trim().slice(0, 60);
    }
    chat.system = $('system').value;
    localStorage.setItem(STORE_SYSTEM, chat.system);
    chat.updated = Date.now();
    const cfg = opt.model.cfg;
    const maxTokens = readMaxTokens();
    const { messages, dropped } = fitContext(chat.system, chat.messages, opt.maxModelLen, maxTokens);
    const reply = { role: 'assistant', content: '', reasoning: '', model: opt.id, error: '', notice: '', stopped: false, stats: null };
    if (dropped) reply.notice = `${dropped} earlier message${dropped > 1 ? 's' : ''} left out to fit the context`;
    $('context-notice').textContent = reply.notice;
    $('context-notice').hidden = !dropped;
    chat.messages.push(reply);
    saveChats();
    const views = renderChat();
    const view = views[views.length - 1];

    const s = { ctrl: new AbortController(), view, t0: performance.now(), tFirst: null, chunks: 0, usage: null, node: '' };
    state.streaming = s;
    view.live = true;
    updateView(view);
    setBusy(true);
    liveLine();
    const ticker = setInterval(liveLine, 200);
    let pending = false;
    const paint = () => {
      if (pending) return;
      pending = true;
      setTimeout(() => { pending = false; updateView(view); $('messages').scrollTop = $('messages').scrollHeight; }, 50);
    };

    try {
      const resp = await fetch(pageUrl(cfg.path, 'v1/chat/completions'), {
        method: 'POST',
        headers: authHeaders({ 'Content-Type': 'application/json', Accept: 'text/event-stream' }),
        body: JSON.stringify({
          model: opt.id, messages, stream: true, stream_options: { include_usage: true }, max_tokens: maxTokens,
        }),
        signal: s.ctrl.signal,
        cache: 'no-store',
      });
      s.node = resp.headers.get(NODE_HEADER) || '';
      if (!resp.ok) {
        reply.error = await httpError(resp);
        showError(reply.error);
      } else {
        await readEvents(resp.body, (data) => {
          if (data.error) throw new Error(serverMessage(JSON.stringify(data)));
          if (data.usage) s.usage = data.usage;
          const delta = data.choices && data.choices[0] && data.choices[0].delta;
          if (!delta) return;
          const thought = str(delta.reasoning_content) || str(delta.reasoning);
          const content = str(delta.content);
          if (!thought && !content) return;
          if (s.tFirst == null) s.tFirst = performance.now();
          s.chunks++;
          if (thought) { reply.reasoning += thought; if (!reply.content) view.reasoning.open = true; }
          if (content) {
            if (!reply.content && reply.reasoning) view.reasoning.open = false;
            reply.content += content;
          }
          paint();
        });
      }
    } catch (e) {
      if (e.name === 'AbortError') reply.stopped = true;
      else {
        reply.error = `${reply.content ? 'the stream broke off' : 'request failed'}: ${e.message}`;
        showError(reply.error);
      }
    } finally {
      clearInterval(ticker);
      const tEnd = performance.now();
      if (!reply.error || s.chunks) reply.stats = finalStats(s, tEnd, cfg, messages);
      state.streaming = null;
      view.live = false;
      chat.updated = Date.now();
      saveChats();
      setBusy(false);
      renderChat();
    }
  }

  function finalStats(s, tEnd, cfg, messages) {
    const u = s.usage || {};
    const counted = !Number.isFinite(u.completion_tokens);
    const completion = counted ? s.chunks : u.completion_tokens;
    const promptEstimated = !Number.isFinite(u.prompt_tokens);
    const prompt = promptEstimated ? messages.reduce((n, m) => n + estimateTokens(m.content), 0) : u.prompt_tokens;
    const prices = modelPrices(cfg);
    return {
      ttft_ms: s.tFirst == null ? null : s.tFirst - s.t0,
      completion_tokens: completion,
      prompt_tokens: prompt,
      counted,
      prompt_estimated: promptEstimated,
      tps: tokensPerSecond(completion, s.tFirst, tEnd),
      cost: prices ? (prompt / 1000) * prices.pin + (completion / 1000) * prices.pout : null,
      currency: state.config.currency,
      node: s.node,
    };
  }

  /** Server-sent events from a fetch body: each `data:` payload, JSON-decoded, to onData; stops at [DONE]. */
  async function readEvents(body, onData) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    const handle = (event) => {
      const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (!data) return false;
      if (data.trim() === '[DONE]') return true;
      let obj;
      try { obj = JSON.parse(data); } catch (_) { return false; }
      onData(obj);
      return false;
    };
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true }).replace(/\r/g, '');
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const event = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          if (handle(event)) return;
        }
      }
      buf += decoder.decode();
      if (buf.trim()) handle(buf);
    } finally {
      reader.releaseLock();
    }
  }

  function regenerate() {
    const chat = currentChat(false);
    if (!chat || state.streaming) return;
    const last = chat.messages[chat.messages.length - 1];
    if (!last || last.role !== 'assistant') return;
    chat.messages.pop();
    if (chat.messages.length && chat.messages[chat.messages.length - 1].role === 'user') send(null);
  }

  // ---------------------------------------------------------------- fleet panel

  /** Prometheus text format: [{name, labels, value}]; comments and blank lines skipped;
   * values may be NaN, +Inf, -Inf; a trailing timestamp is ignored. */
  function parseProm(text) {
    const out = [];
    for (const raw of String(text).split('\n')) {
      const line = raw.trim();
      if (!line || line.startsWith('#')) continue;
      const nm = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line);
      if (!nm) continue;
      let i = nm[0].length;
      const labels = {};
      if (line[i] === '{') {
        i++;
        for (;;) {
          while (line[i] === ' ' || line[i] === ',') i++;
          if (line[i] === '}') { i++; break; }
          const ln = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(line.slice(i));
          if (!ln) { i = -1; break; }
          i += ln[0].length;
          while (line[i] === ' ') i++;
          if (line[i] !== '=') { i = -1; break; }
          i++;
          while (line[i] === ' ') i++;
          if (line[i] !== '"') { i = -1; break; }
          i++;
          let v = '';
          while (i < line.length && line[i] !== '"') {
            if (line[i] === '\\' && i + 1 < line.length) {
              const e = line[i + 1];
              v += e === 'n' ? '\n' : e;
              i += 2;
            } else { v += line[i]; i++; }
          }
          if (line[i] !== '"') { i = -1; break; }
          i++;
          labels[ln[0]] = v;
        }
        if (i < 0) continue; // a malformed line
      }
      const tok = line.slice(i).trim().split(/\s+/)[0];
      let value;
      if (/^nan$/i.test(tok)) value = NaN;
      else if (/^\+?inf$/i.test(tok)) value = Infinity;
      else if (/^-inf$/i.test(tok)) value = -Infinity;
      else if (tok !== '' && !Number.isNaN(Number(tok))) value = Number(tok);
      else continue;
      out.push({ name: nm[0], labels, value });
    }
    return out;
  }

  /** Samples of the first of `names` present; null when none is. */
  function samplesOf(samples, names) {
    for (const n of names) {
      const got = samples.filter((s) => s.name === n);
      if (got.length) return got;
    }
    return null;
  }

  function sumOf(samples, names) {
    const got = samplesOf(samples, names);
    return got ? got.reduce((n, s) => n + s.value, 0) : null;
  }

  function meanOf(samples, names) {
    const got = samplesOf(samples, names);
    return got ? got.reduce((n, s) => n + s.value, 0) / got.length : null;
  }

  async function fetchMetrics(path) {
    const resp = await fetch(pageUrl(path), { headers: authHeaders({ Accept: 'text/plain' }), cache: 'no-store' });
    if (!resp.ok) throw new Error(`${resp.status}${resp.statusText ? ` ${resp.statusText}` : ''}`);
    return parseProm(await resp.text());
  }

  const shown = (v, fmt) => (v == null || !Number.isFinite(v) ? '—' : fmt(v));
  const gib = (b) => (b / 1024 ** 3).toFixed(1);

  /** The node's accelerators from vllm_fleet_accelerator_* (the node exporter's contract), by index. */
  function accelerators(samples) {
    const byIndex = new Map();
    const take = (name, field) => {
      for (const s of samples) {
        if (s.name !== name) continue;
        const idx = s.labels.index ?? '0';
        if (!byIndex.has(idx)) byIndex.set(idx, {});
        byIndex.get(idx)[field] = s.value;
      }
    };
    take('vllm_fleet_accelerator_utilization_percent', 'util');
    take('vllm_fleet_accelerator_memory_used_bytes', 'used');
    take('vllm_fleet_accelerator_memory_total_bytes', 'total');
    return [...byIndex.entries()].sort((a, b) => Number(a[0]) - Number(b[0]) || a[0].localeCompare(b[0]));
  }

  async function refreshFleet() {
    if (state.fleetBusy || document.hidden || !state.config) return;
    state.fleetBusy = true;
    try {
      const nodeCache = new Map();
      const nodeMetrics = (path) => {
        if (!nodeCache.has(path)) nodeCache.set(path, fetchMetrics(path).then((v) => ({ v }), (e) => ({ e })));
        return nodeCache.get(path);
      };
      const blocks = await Promise.all(state.config.models.map(async (cfg) => {
        const rows = await Promise.all((cfg.replicas || []).map((r) => replicaRow(r, nodeMetrics)));
        return el('div', 'fleet-model', null, el('div', 'fleet-model-name', cfg.name), ...rows);
      }));
      $('fleet-body').replaceChildren(...(blocks.length ? blocks : [el('div', 'muted', 'no models configured')]));
      $('fleet-updated').textContent = new Date().toLocaleTimeString();
    } finally {
      state.fleetBusy = false;
    }
  }

  async function replicaRow(r, nodeMetrics) {
    const row = el('div', 'fleet-replica');
    row.dataset.node = str(r.node);
    const head = el('div', 'fleet-replica-head', null, el('span', 'fleet-node', r.node || '?'));
    row.append(head);
    let samples = null;
    try {
      samples = r.metrics ? await fetchMetrics(r.metrics) : null;
      if (!samples) throw new Error('no metrics path');
    } catch (e) {
      head.append(el('span', 'health down', `down (${e.message})`));
      state.fleetPrev.delete(r.metrics);
    }
    if (samples) {
      head.append(el('span', 'health up', 'up'));
      const running = sumOf(samples, ['vllm:num_requests_running']);
      const waiting = sumOf(samples, ['vllm:num_requests_waiting']);
      const kv = meanOf(samples, ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc']);
      const tokens = sumOf(samples, ['vllm:generation_tokens_total', 'vllm:generation_tokens']);
      const now = performance.now();
      const prev = state.fleetPrev.get(r.metrics);
      let rate = null;
      if (prev && tokens != null && prev.tokens != null && tokens >= prev.tokens && now > prev.t) {
        rate = (tokens - prev.tokens) / ((now - prev.t) / 1000);
      }
      state.fleetPrev.set(r.metrics, { t: now, tokens });
      const stat = (k, text) => { const s = el('span', `fleet-stat fleet-${k}`, text); s.dataset.stat = k; return s; };
      row.append(el('div', 'fleet-stats', null,
        stat('running', `running ${shown(running, (v) => String(v))}`),
        stat('waiting', `waiting ${shown(waiting, (v) => String(v))}`),
        stat('kv', `KV ${shown(kv, (v) => `${(v * 100).toFixed(0)}%`)}`),
        stat('gen', `${shown(rate, (v) => v.toFixed(1))} tok/s`)));
    }
    if (r.node_metrics) {
      const got = await nodeMetrics(r.node_metrics);
      const accs = got.v ? accelerators(got.v) : [];
      if (!accs.length) {
        row.append(el('div', 'fleet-acc', got.e ? `accelerators — (${got.e.message})` : 'accelerators —'));
      }
      for (const [idx, a] of accs) {
        const mem = a.used != null && a.total != null && Number.isFinite(a.used) && Number.isFinite(a.total)
          ? `${gib(a.used)} / ${gib(a.total)} GiB` : '—';
        const line = el('div', 'fleet-acc', `#${idx} util ${shown(a.util, (v) => `${v.toFixed(0)}%`)} · mem ${mem}`);
        line.dataset.index = idx;
        if (Number.isFinite(a.util)) {
          const bar = el('span', 'bar');
          const fill = el('span', 'bar-fill');
          fill.style.width = `${Math.max(0, Math.min(100, a.util))}%`; // CSSOM, allowed by style-src 'self'
          bar.append(fill);
          line.append(bar);
        }
        row.append(line);
      }
    }
    return row;
  }

  // ---------------------------------------------------------------- start

  function validConfig(c) {
    if (!c || typeof c !== 'object' || !Array.isArray(c.models)) throw new Error('config.json has no "models" list');
    const models = c.models.filter((m) => m && typeof m.name === 'string' && typeof m.path === 'string').map((m) => ({
      ...m, version: str(m.version), replicas: Array.isArray(m.replicas) ? m.replicas.filter((r) => r && typeof r === 'object') : [],
    }));
    const presets = Array.isArray(c.presets) ? c.presets.filter((p) => typeof p === 'string') : DEFAULT_PRESETS;
    const every = Number(c.fleet_refresh_seconds);
    const fleetRefreshMs = Number.isFinite(every) && every >= 1 ? every * 1000 : FLEET_REFRESH_MS;
    return { title: str(c.title) || 'vllm-fleet', currency: str(c.currency), presets, models, fleetRefreshMs };
  }

  function renderKeyStatus() {
    $('key-status').textContent = key.get() ? 'key set for this tab only' : 'no key';
    $('key-forget').hidden = !key.get();
  }

  function wire() {
    $('key-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const v = $('key').value.trim();
      $('key').value = ''; // the key stays out of the page
      if (!v) return;
      key.set(v);
      renderKeyStatus();
      loadModels();
    });
    $('key-forget').addEventListener('click', () => { key.clear(); renderKeyStatus(); loadModels(); });
    $('model').addEventListener('change', () => {
      const o = selectedOption();
      if (o) localStorage.setItem(STORE_MODEL, `${o.model.cfg.name}/${o.id}`);
      renderModelInfo();
    });
    $('prompt-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const text = $('prompt').value;
      if (!text.trim() || state.streaming) return;
      $('prompt').value = '';
      send(text);
    });
    $('prompt').addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { // not while an IME composes (Chinese input)
        e.preventDefault();
        $('prompt-form').requestSubmit();
      }
    });
    $('stop').addEventListener('click', () => { if (state.streaming) state.streaming.ctrl.abort(); });
    $('new-chat').addEventListener('click', () => {
      if (state.streaming) return;
      state.current = null;
      saveChats();
      $('context-notice').hidden = true;
      renderChat();
      $('prompt').focus();
    });
    document.addEventListener('visibilitychange', () => { if (!document.hidden) refreshFleet(); });
  }

  async function start() {
    wire();
    renderKeyStatus();
    state.chats = loadChats();
    state.current = localStorage.getItem(STORE_CURRENT);
    if (!state.chats.some((c) => c.id === state.current)) state.current = null;
    renderChat();
    try {
      const resp = await fetch(pageUrl('config.json'), { cache: 'no-store' });
      if (!resp.ok) throw new Error(await httpError(resp));
      state.config = validConfig(await resp.json());
    } catch (e) {
      showError(`could not read config.json: ${e.message}`);
      return;
    }
    document.title = state.config.title;
    $('title').textContent = state.config.title;
    $('presets').replaceChildren(...state.config.presets.map((p) => {
      const b = el('button', 'preset', p);
      b.type = 'button';
      b.addEventListener('click', () => { $('prompt').value = p; $('prompt').focus(); });
      return b;
    }));
    state.models = state.config.models.map((cfg) => ({ cfg, served: [], error: '' }));
    renderPicker();
    if (key.get()) await loadModels();
    refreshFleet();
    setInterval(refreshFleet, state.config.fleetRefreshMs);
    document.body.dataset.ready = 'true';
  }

  start();
})();
