// Part of the inspector's one script (see mod.rs): the tool list, calls, questions, results, the envelope log, and start-up.

// ----- tools ---------------------------------------------------------------------

// What a tool says about itself (docs/protocol.md §6.13, MCP's meaning): its title,
// its hints and its icons, each optional.
const titleOf = (t) => (t && typeof t.title === 'string' && t.title ? t.title : '');
const annotationsOf = (t) => (t && t.annotations && typeof t.annotations === 'object' ? t.annotations : {});

// Destructive only when it says so (destructiveHint: true), and not read-only,
// where MCP gives destructiveHint no meaning. (MCP's default for a tool that
// says nothing is destructive; asking before every such call would make the
// question meaningless.)
function isDestructive(t) {
  const a = annotationsOf(t);
  return a.destructiveHint === true && a.readOnlyHint !== true;
}

// The badges of the hints a tool declares true.
function badges(t) {
  const a = annotationsOf(t);
  const shown = [];
  if (a.readOnlyHint === true) shown.push('read-only');
  if (isDestructive(t)) shown.push('destructive');
  if (a.idempotentHint === true) shown.push('idempotent');
  if (a.openWorldHint === true) shown.push('open-world');
  return shown.map((hint) => el('li', { class: 'badge', dataset: { hint }, text: hint }));
}

// The first icon this page can show: a data: image, or https (the page's
// policy allows no other images).
function iconSrc(t) {
  const icons = t && Array.isArray(t.icons) ? t.icons : [];
  const first = icons.find((i) => i && typeof i.src === 'string');
  if (!first) return '';
  return /^(data:image\/|https:)/i.test(first.src) ? first.src : '';
}

// A tool as the list has it, with what its TOOL_SCHEMA added.
function toolInfo(name) {
  return { ...(state.schemas.get(name) || {}), ...(state.tools.find((t) => t.name === name) || { name }) };
}

function renderTools(tools) {
  state.tools = tools.filter((t) => t && typeof t.name === 'string');
  const list = $('tools');
  list.replaceChildren(...state.tools.map((t) => {
    const icon = iconSrc(t);
    const title = titleOf(t);
    const hints = badges(t);
    return el('li', { dataset: { tool: t.name } },
      el('button', { type: 'button', 'data-tool': t.name },
        el('span', { class: 'tool-head' },
          icon ? el('img', { class: 'tool-icon', src: icon, alt: '' }) : null,
          title ? el('span', { class: 'tool-title', text: title }) : null,
          el('span', { class: 'tool-name', text: t.name })),
        t.description ? el('span', { class: 'tool-desc', text: t.description }) : null,
        hints.length ? el('ul', { class: 'badges' }, ...hints) : null));
  }));
  for (const button of list.querySelectorAll('button')) {
    button.addEventListener('click', () => selectTool(button.dataset.tool));
  }
  applyFilter();
  const wanted = decodeURIComponent(location.hash.replace(/^#tool=/, ''));
  if (state.selected && state.tools.some((t) => t.name === state.selected)) markSelected();
  else if (location.hash.startsWith('#tool=') && state.tools.some((t) => t.name === wanted)) selectTool(wanted);
}

function applyFilter() {
  const q = $('filter').value.trim().toLowerCase();
  let shown = 0;
  for (const li of $('tools').children) {
    const tool = state.tools.find((t) => t.name === li.dataset.tool);
    const hit = !q || tool.name.toLowerCase().includes(q) || (tool.description || '').toLowerCase().includes(q)
      || titleOf(tool).toLowerCase().includes(q);
    li.hidden = !hit;
    if (hit) shown += 1;
  }
  $('tool-count').textContent = q ? `(${shown} of ${state.tools.length})` : `(${state.tools.length})`;
}

function markSelected() {
  for (const b of $('tools').querySelectorAll('button')) {
    b.setAttribute('aria-current', b.dataset.tool === state.selected ? 'true' : 'false');
  }
}

function selectTool(name) {
  if (state.call && !state.call.done && state.call.tool !== name) {
    // The running call stays visible until it ends or is cancelled.
  }
  state.selected = name;
  history.replaceState(null, '', `${location.pathname}${location.search}#tool=${encodeURIComponent(name)}`);
  markSelected();
  hideConfirm();
  const tool = toolInfo(name);
  $('tool-empty').hidden = true;
  $('tool-body').hidden = false;
  showHeading(tool);
  $('tool-description').textContent = tool.description || '';
  if (!state.call || state.call.tool !== name) $('run').hidden = true;
  const known = state.schemas.get(name);
  if (known) {
    renderParams(known);
  } else {
    $('params').replaceChildren(el('p', { class: 'muted', text: 'loading the schema…' }));
    $('params').dataset.tool = '';
    // The schema as validated: every constraint, as the form checks it.
    const id = send('TOOL_SCHEMA', 'USER', { tool: name, profile: 'full' });
    state.pending.set(id, { kind: 'schema', tool: name });
  }
}

// The tool's title (its name beside it), first icon and hint badges.
function showHeading(tool) {
  const title = titleOf(tool);
  $('tool-title').textContent = title;
  $('tool-title').hidden = !title;
  $('tool-name').textContent = tool.name;
  const icon = iconSrc(tool);
  if (icon) $('tool-icon').src = icon;
  else $('tool-icon').removeAttribute('src');
  $('tool-icon').hidden = !icon;
  const hints = badges(tool);
  $('tool-badges').replaceChildren(...hints);
  $('tool-badges').hidden = !hints.length;
}

function onSchema(p) {
  if (typeof p.tool !== 'string') return;
  for (const [id, asked] of state.pending) {
    if (asked.kind === 'schema' && asked.tool === p.tool) state.pending.delete(id);
  }
  state.schemas.set(p.tool, p);
  if (state.selected === p.tool) {
    showHeading(toolInfo(p.tool));
    renderParams(p);
  }
}

function renderParams(schemaReply) {
  const schema = schemaReply.inputSchema || schemaReply.schema || { type: 'object' };
  state.form = buildForm(schema);
  $('params').replaceChildren(state.form.element);
  $('params').dataset.tool = schemaReply.tool;
  $('raw-toggle').checked = false;
  $('raw-params').hidden = true;
  $('params').hidden = false;
  $('params-json-error').hidden = true;
}

// ----- calls ---------------------------------------------------------------------

function setCallStatus(text) {
  $('call-status').textContent = text;
  $('run').dataset.status = text;
}

function call() {
  if (!state.selected || !state.transport) return;
  let paramsValue;
  if ($('raw-toggle').checked) {
    try {
      paramsValue = JSON.parse($('params-json').value || '{}');
      $('params-json-error').hidden = true;
    } catch (e) {
      $('params-json-error').textContent = `not valid JSON: ${e.message}`;
      $('params-json-error').hidden = false;
      return;
    }
  } else if (state.form) {
    state.form.clearErrors();
    const { value, errors } = state.form.collect();
    if (errors.length) {
      state.form.showErrors(errors);
      return;
    }
    paramsValue = value;
  } else {
    paramsValue = {};
  }
  const tool = toolInfo(state.selected);
  if (isDestructive(tool)) {
    // Asked in the page (not window.confirm): nothing is sent until "Call it".
    state.confirming = { tool: state.selected, params: paramsValue };
    $('confirm-message').textContent = `This tool is destructive: ${titleOf(tool) || tool.name}. Call it?`;
    $('confirm').hidden = false;
    $('confirm-cancel').focus();
    return;
  }
  sendCall(state.selected, paramsValue);
}

function hideConfirm() {
  state.confirming = null;
  $('confirm').hidden = true;
}

function confirmCall() {
  const asked = state.confirming;
  hideConfirm();
  if (asked && asked.tool === state.selected && state.transport) sendCall(asked.tool, asked.params);
}

function sendCall(toolName, paramsValue) {
  const callId = `inspector-${++state.callCounter}-${uuid().slice(0, 8)}`;
  state.call = { id: callId, tool: toolName, done: false };
  for (const q of state.questions.values()) q.element.remove();
  state.questions.clear();
  $('run').hidden = false;
  $('call-id').textContent = callId;
  setCallStatus('SENT');
  const progress = $('progress');
  progress.removeAttribute('value');
  $('run').dataset.progress = '';
  $('progress-label').textContent = '';
  $('partial-panel').hidden = true;
  $('logs').replaceChildren();
  $('logs-panel').hidden = true;
  $('result').hidden = true;
  $('result').dataset.status = '';
  $('cancel').disabled = false;
  const id = send('TOOL_CALL', 'USER', { call_id: callId, tool: toolName, params: paramsValue });
  state.pending.set(id, { kind: 'call', callId });
}

function cancel() {
  if (!state.call || state.call.done) return;
  send('TOOL_CANCEL', 'USER', { call_id: state.call.id, reason: 'cancelled in the inspector' });
  $('cancel').disabled = true;
}

function isCurrent(p) {
  return state.call && p.call_id === state.call.id;
}

function onUpdate(p) {
  if (!isCurrent(p)) return;
  if (typeof p.status === 'string') setCallStatus(p.status);
  if (typeof p.progress === 'number') {
    $('progress').value = p.progress;
    $('run').dataset.progress = String(p.progress);
    $('progress-label').textContent = `${p.progress}%`;
  }
  if ('partial' in p) {
    $('partial').textContent = pretty(p.partial);
    $('partial-panel').hidden = false;
  }
  if (p.log && typeof p.log === 'object') {
    const line = el('li', { 'data-level': p.log.level },
      el('span', { class: 'level', text: p.log.level || 'log' }), String(p.log.message ?? ''),
      p.log.data !== undefined ? el('code', { text: ` ${JSON.stringify(p.log.data)}` }) : null);
    $('logs').append(line);
    $('logs-panel').hidden = false;
  }
  if (p.status === 'WAITING_INPUT' && p.input_request) ask(p.input_request);
  if (p.status === 'RUNNING' && !p.log && p.progress === undefined) {
    // The answer was taken: the questions it answered are over.
    for (const [rid, q] of state.questions) {
      if (q.answered) {
        q.element.remove();
        state.questions.delete(rid);
      }
    }
  }
}

function ask(request) {
  const rid = String(request.request_id);
  const old = state.questions.get(rid);
  if (old) old.element.remove();
  const form = buildForm(request.schema || { type: 'object', properties: {} });
  const accept = el('button', { type: 'button', class: 'primary', 'data-action': 'accept', text: 'Accept' });
  const decline = el('button', { type: 'button', 'data-action': 'decline', text: 'Decline' });
  const element = el('form', { class: 'question', 'data-request-id': rid, novalidate: true, autocomplete: 'off' },
    el('p', { class: 'question-message', text: request.message || 'The tool asks:' }),
    form.element, el('div', { class: 'actions' }, accept, decline));
  element.addEventListener('submit', (e) => e.preventDefault());
  const q = { form, element, answered: false, buttons: [accept, decline] };
  state.questions.set(rid, q);
  accept.addEventListener('click', () => answer(rid, 'accept'));
  decline.addEventListener('click', () => answer(rid, 'decline'));
  $('questions').append(element);
  const first = element.querySelector('input, select, textarea');
  if (first) first.focus();
}

function answer(rid, action) {
  const q = state.questions.get(rid);
  if (!q || !state.call) return;
  q.form.clearErrors();
  const payload = { call_id: state.call.id, request_id: rid, action };
  if (action === 'accept') {
    const { value, errors } = q.form.collect();
    if (errors.length) {
      q.form.showErrors(errors);
      return;
    }
    payload.content = value;
  }
  q.answered = true;
  for (const b of q.buttons) b.disabled = true;
  const id = send('TOOL_INPUT', 'USER', payload);
  state.pending.set(id, { kind: 'answer', requestId: rid, callId: state.call.id });
}

function answerRefused(q, p) {
  q.answered = false;
  for (const b of q.buttons) b.disabled = false;
  const violations = p.detail && Array.isArray(p.detail.violations) ? p.detail.violations : null;
  if (p.code === 'INVALID_PARAMS' && violations) q.form.showErrors(violations);
  else q.form.showErrors([{ path: '', message: `${p.code}: ${p.message}` }]);
}

function onDone(p) {
  if (!isCurrent(p)) return;
  state.call.done = true;
  for (const [id, asked] of state.pending) if (asked.callId === p.call_id) state.pending.delete(id);
  for (const q of state.questions.values()) q.element.remove();
  state.questions.clear();
  const status = typeof p.status === 'string' ? p.status : 'OK';
  setCallStatus(status);
  $('cancel').disabled = true;
  // The bar stops: full when done, where it was otherwise.
  if (status === 'OK') $('progress').value = 100;
  else if (!$('run').dataset.progress) $('progress').value = 0;
  const result = p.result;
  $('result').hidden = false;
  $('result').dataset.status = status;
  $('result-status').textContent = status;
  $('result-error').hidden = true;
  $('result-content').replaceChildren();
  if (status === 'ERROR' && result && typeof result === 'object') {
    $('result-error').textContent = `${result.code || 'ERROR'}: ${result.error || ''}`;
    $('result-error').hidden = false;
    $('result').dataset.code = result.code || '';
    if (result.code === 'INVALID_PARAMS' && Array.isArray(result.details) && state.form
        && state.selected === state.call.tool && !$('raw-toggle').checked) {
      state.form.showErrors(result.details);
    }
  } else {
    $('result').dataset.code = '';
  }
  if (status === 'OK' && result && Array.isArray(result.content)) renderContent(result.content);
  $('result-body').textContent = result === undefined ? '(no result)' : pretty(result);
}

// Content blocks (docs/protocol.md §6.12): text as text, images and audio from their data.
function renderContent(blocks) {
  const box = $('result-content');
  for (const b of blocks) {
    if (!b || typeof b !== 'object') continue;
    const mime = typeof b.mimeType === 'string' && /^[\w.+-]+\/[\w.+-]+$/.test(b.mimeType) ? b.mimeType : '';
    if (b.type === 'text') box.append(el('pre', { class: 'content-text', text: String(b.text ?? '') }));
    else if (b.type === 'image' && mime.startsWith('image/') && typeof b.data === 'string') {
      box.append(el('img', { src: `data:${mime};base64,${b.data}`, alt: 'image from the tool', class: 'content-image' }));
    } else if (b.type === 'audio' && mime.startsWith('audio/') && typeof b.data === 'string') {
      box.append(el('audio', { controls: true, src: `data:${mime};base64,${b.data}` }));
    } else if (b.type === 'resource' && b.resource) {
      const r = b.resource;
      box.append(el('div', { class: 'muted', text: `resource ${r.uri || ''} ${r.mimeType || ''}` }),
        el('pre', { text: typeof r.text === 'string' ? r.text : `(${(r.blob || '').length} base64 characters)` }));
    } else if (b.type === 'resource_link') {
      box.append(el('div', { class: 'muted', text: `link: ${b.name || ''} ${b.uri || ''}` }));
    }
  }
}

// ----- the envelope log ----------------------------------------------------------

let wireCount = 0;
function logEnvelope(dir, env, text) {
  wireCount += 1;
  $('wire-count').textContent = `(${wireCount})`;
  const list = $('wire-log');
  const type = env && typeof env.type === 'string' ? env.type : '?';
  list.append(el('li', { 'data-dir': dir, 'data-type': type },
    el('span', { class: 'dir', title: dir === 'out' ? 'sent' : 'received', text: dir === 'out' ? '→' : '←' }),
    el('code', { text })));
  while (list.children.length > WIRE_LOG_MAX) list.firstChild.remove();
}

// ----- wiring --------------------------------------------------------------------

for (const event of ['input', 'change']) $('filter').addEventListener(event, applyFilter);
$('call').addEventListener('click', call);
$('cancel').addEventListener('click', cancel);
$('confirm-call').addEventListener('click', confirmCall);
$('confirm-cancel').addEventListener('click', hideConfirm);
$('params').addEventListener('submit', (e) => { e.preventDefault(); call(); });
$('params').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && e.target.tagName === 'INPUT' && e.target.type !== 'checkbox') {
    e.preventDefault();
    call();
  }
});
$('raw-toggle').addEventListener('change', () => {
  const raw = $('raw-toggle').checked;
  if (raw && state.form) $('params-json').value = pretty(state.form.collect().value);
  $('raw-params').hidden = !raw;
  $('params').hidden = raw;
});
$('wire-clear').addEventListener('click', () => { $('wire-log').replaceChildren(); wireCount = 0; $('wire-count').textContent = '(0)'; });
$('log-level').addEventListener('change', () => { if (state.session) send('HAI', 'SYSTEM', clientHai()); });
$('reconnect').addEventListener('click', () => connect());
$('auth-form').addEventListener('submit', (e) => {
  e.preventDefault();
  state.token = $('token').value.trim();
  if (state.token) sessionStorage.setItem('haip-inspector-token', state.token);
  else sessionStorage.removeItem('haip-inspector-token');
  if (state.transport) state.transport.close();
  state.transport = null;
  connect();
});

connect();
