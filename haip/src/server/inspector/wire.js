// Part of the inspector's one script (see mod.rs): helpers, the connection, sending and receiving envelopes.

// ----- small helpers ---------------------------------------------------------

const $ = (id) => document.getElementById(id);

// An element with attributes and children; text always goes in as text.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'text') e.textContent = v;
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

// A UUID v4 from the browser's random source (crypto.randomUUID exists
// only in secure contexts; a LAN address over http is not one).
function uuid() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const encoder = new TextEncoder();
const utf8Length = (text) => encoder.encode(text).length;
const pretty = (value) => JSON.stringify(value, null, 2);
const pointerEscape = (name) => String(name).replace(/~/g, '~0').replace(/\//g, '~1');

// ----- protocol constants (docs/protocol.md §3, §5, §12, §17) ------------------------------

const HAIP_VERSION = '1.1.2';
const EVENTS = ['HAI', 'RUN_STARTED', 'RUN_FINISHED', 'RUN_CANCEL', 'RUN_ERROR', 'PING', 'PONG',
  'REPLAY_REQUEST', 'TEXT_MESSAGE_START', 'TEXT_MESSAGE_PART', 'TEXT_MESSAGE_END', 'AUDIO_CHUNK',
  'TOOL_CALL', 'TOOL_UPDATE', 'TOOL_DONE', 'TOOL_CANCEL', 'TOOL_LIST', 'TOOL_SCHEMA', 'ERROR',
  'FLOW_UPDATE', 'PAUSE_CHANNEL', 'RESUME_CHANNEL'];
const AUTH_CODES = ['MISSING_TOKEN', 'INVALID_TOKEN', 'TOKEN_EXPIRED'];
// Credit this page grants the server per channel, and gives back once it
// has read this much (docs/protocol.md §12.2).
const GRANT = { messages: 1000, bytes: 1048576 };
const GRANT_BATCH = { messages: 100, bytes: 262144 };
const WIRE_LOG_MAX = 500;

// ----- state -----------------------------------------------------------------------

const params = new URLSearchParams(location.search);
const state = {
  transport: null,      // the open connection (WebSocket or SSE)
  session: null,        // the session id from the server's HAI
  lastSeq: 0,           // highest seq received on that session
  outSeq: 0,            // our own envelope counter
  credit: null,         // per channel: what we may still send (server's credit)
  owed: {},             // per channel: what we read and have not granted back
  queue: [],            // envelopes waiting for credit
  pending: new Map(),   // our envelope id -> what it asked for
  tools: [],
  schemas: new Map(),   // tool name -> TOOL_SCHEMA payload
  selected: null,       // the tool shown
  form: null,           // the params form of the tool shown
  call: null,           // {id, tool, done}
  confirming: null,     // {tool, params}: a destructive call waiting for "Call it"
  questions: new Map(), // request_id -> {form, element}
  token: sessionStorage.getItem('haip-inspector-token') || '',
  authFailed: false,
  callCounter: 0,
};

function setStatus(stateName, text) {
  const s = $('status');
  s.dataset.state = stateName;
  s.textContent = text;
  $('reconnect').hidden = stateName !== 'closed';
}

function showError(text) {
  $('error').textContent = text;
  $('error-panel').hidden = !text;
}

function showAuth(message) {
  state.authFailed = true;
  $('auth-message').textContent = message;
  $('auth').hidden = false;
  setStatus('auth', 'needs a token');
  $('token').value = state.token;
  $('token').focus();
}

// ----- transports ----------------------------------------------------------------

// The routes are beside this page: `/agent/inspector` talks to `/agent/haip`
// when the server is nested under a prefix.
const base = `${location.origin}${location.pathname.replace(/\/inspector\/?$/, '')}`;
const wsUrl = `${location.protocol === 'https:' ? 'wss:' : 'ws:'}//${location.host}${location.pathname.replace(/\/inspector\/?$/, '')}/haip`;

function connect() {
  state.authFailed = false;
  state.session = null;
  state.lastSeq = 0;
  state.credit = null;
  state.owed = {};
  state.queue = [];
  state.pending.clear();
  showError('');
  setStatus('connecting', 'connecting…');
  if (params.get('transport') === 'sse') connectSse('asked for by ?transport=sse');
  else connectWs();
}

function connectWs() {
  $('transport').textContent = 'WebSocket';
  // A browser cannot set headers on a WebSocket: the token rides as a
  // subprotocol entry `token.<JWT>`, beside `haip`, which the server selects.
  const protocols = ['haip'];
  if (state.token) protocols.push(`token.${state.token}`);
  let ws;
  try {
    ws = new WebSocket(wsUrl, protocols);
  } catch (e) {
    connectSse(`WebSocket refused: ${e.message}`);
    return;
  }
  let heard = false;
  const transport = {
    kind: 'WebSocket',
    send: (text) => ws.send(text),
    close: () => { transport.closed = true; ws.close(1000); },
    closed: false,
  };
  state.transport = transport;
  ws.onmessage = (event) => {
    heard = true;
    if (typeof event.data === 'string') receive(event.data);
  };
  ws.onclose = (event) => {
    if (transport.closed || state.transport !== transport) return;
    transport.closed = true;
    if (state.authFailed) {
      state.transport = null; // the page already says why
      return;
    }
    if (!heard) {
      // Never got a word: no WebSocket here (a proxy, an origin list). Try SSE.
      connectSse(`WebSocket failed (close ${event.code})`);
      return;
    }
    lost(`closed (${event.code}${event.reason ? ` ${event.reason}` : ''})`);
  };
}

function authHeaders() {
  return state.token ? { Authorization: `Bearer ${state.token}` } : {};
}

async function connectSse(why) {
  $('transport').textContent = `SSE (${why})`;
  const abort = new AbortController();
  let sessionHeader = null;
  let sending = Promise.resolve();
  const transport = {
    kind: 'SSE',
    closed: false,
    close: () => { transport.closed = true; abort.abort(); },
    // Upstream envelopes are POSTed one at a time, in order (docs/protocol.md §15.4).
    send: (text) => {
      sending = sending.then(async () => {
        if (transport.closed) return;
        try {
          const response = await fetch(`${base}/haip/message`, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json', 'X-HAIP-Session': sessionHeader || state.session || '', ...authHeaders() },
            body: text,
            cache: 'no-store',
          });
          if (response.status === 401) showAuth(await authText(response));
          else if (!response.ok) showError(`POST /haip/message: ${response.status} ${await response.text()}`);
        } catch (e) {
          showError(`POST /haip/message failed: ${e.message}`);
        }
      });
    },
  };
  state.transport = transport;
  let response;
  try {
    response = await fetch(`${base}/haip/sse`, {
      headers: { Accept: 'text/event-stream', ...authHeaders() },
      cache: 'no-store',
      signal: abort.signal,
    });
  } catch (e) {
    if (!transport.closed) lost(`SSE failed: ${e.message}`);
    return;
  }
  if (response.status === 401) {
    transport.closed = true;
    showAuth(await authText(response));
    return;
  }
  if (!response.ok || !response.body) {
    transport.closed = true;
    lost(`SSE refused: ${response.status} ${await response.text()}`);
    return;
  }
  sessionHeader = response.headers.get('X-HAIP-Session');
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
        const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:'))
          .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
        if (data && data !== '[DONE]') receive(data);
      }
    }
  } catch (e) {
    if (!transport.closed) lost(`SSE stream failed: ${e.message}`);
    return;
  }
  if (!transport.closed && state.transport === transport) lost('the SSE stream ended');
}

// The words of a 401 body (`{"error":"Missing token","code":"MISSING_TOKEN"}`).
async function authText(response) {
  let code = '';
  try { code = (await response.json()).code || ''; } catch (_) { /* not JSON */ }
  return authMessage(code);
}

function authMessage(code) {
  if (code === 'INVALID_TOKEN') return 'This server needs a token, and refused this one: invalid token.';
  if (code === 'TOKEN_EXPIRED') return 'This server needs a token, and this one has expired.';
  return 'This server needs a token.';
}

function lost(why) {
  state.transport = null;
  setStatus('closed', `disconnected: ${why}`);
  if (state.call && !state.call.done) {
    setCallStatus('connection lost');
    $('cancel').disabled = true;
    state.call.done = true;
  }
}

// ----- sending -------------------------------------------------------------------

// Sends an envelope with all seven fields (the server accepts less, but
// then `strict_envelope` would not); returns its id.
function send(type, channel, payload) {
  const env = { id: uuid(), session: state.session || uuid(), seq: String(++state.outSeq), ts: String(Date.now()), channel, type, payload };
  state.queue.push(env);
  flush();
  return env.id;
}

// Writes queued envelopes while the server's credit for their channel
// lasts (docs/protocol.md §12); a FLOW_UPDATE from the server resumes it.
function flush() {
  while (state.queue.length && state.transport && !state.transport.closed) {
    const env = state.queue[0];
    const text = JSON.stringify(env);
    const bytes = utf8Length(text);
    const credit = state.credit && creditOf(env.channel);
    if (credit && (credit.messages < 1 || credit.bytes < bytes)) {
      $('transport').dataset.waiting = 'credit';
      return;
    }
    delete $('transport').dataset.waiting;
    if (credit) {
      credit.messages -= 1;
      credit.bytes -= bytes;
    }
    state.queue.shift();
    state.transport.send(text);
    logEnvelope('out', env, text);
  }
}

function creditOf(channel) {
  if (!state.credit[channel]) state.credit[channel] = { ...state.credit.initial };
  return state.credit[channel];
}

// Counts what the server sent on a channel, and grants it back in batches
// so that a server enforcing credit never stalls on this page.
function owe(channel, bytes) {
  if (channel === 'SYSTEM') return; // never held back by credit
  const owed = state.owed[channel] || (state.owed[channel] = { messages: 0, bytes: 0 });
  owed.messages += 1;
  owed.bytes += bytes;
  if (owed.messages >= GRANT_BATCH.messages || owed.bytes >= GRANT_BATCH.bytes) {
    send('FLOW_UPDATE', 'SYSTEM', { channel, add_messages: owed.messages, add_bytes: owed.bytes });
    state.owed[channel] = { messages: 0, bytes: 0 };
  }
}

function clientHai() {
  return {
    haip_version: HAIP_VERSION,
    accept_major: [1],
    accept_events: EVENTS,
    capabilities: {
      tool_input: true,
      log_level: $('log-level').value,
      binary_frames: false,
      flow_control: { initial_credit_messages: GRANT.messages, initial_credit_bytes: GRANT.bytes },
    },
  };
}

// ----- receiving -----------------------------------------------------------------

function receive(text) {
  let env;
  try {
    env = JSON.parse(text);
  } catch (e) {
    logEnvelope('in', null, text);
    return;
  }
  if (!env || typeof env !== 'object') return;
  logEnvelope('in', env, text);
  const seq = Number(env.seq);
  if (state.session && env.session === state.session && Number.isFinite(seq)) {
    state.lastSeq = Math.max(state.lastSeq, seq);
  }
  if (typeof env.channel === 'string') owe(env.channel, utf8Length(text));
  const p = env.payload || {};
  switch (env.type) {
    case 'HAI': return onHai(env, p);
    case 'ERROR': return onError(p);
    case 'PING': send('PONG', 'SYSTEM', typeof p.nonce === 'string' ? { nonce: p.nonce } : {}); return;
    case 'FLOW_UPDATE': return onFlowUpdate(p);
    case 'TOOL_LIST': if (Array.isArray(p.tools)) renderTools(p.tools); return;
    case 'TOOL_SCHEMA': return onSchema(p);
    case 'TOOL_UPDATE': return onUpdate(p);
    case 'TOOL_DONE': return onDone(p);
    default: return;
  }
}

function onHai(env, p) {
  if (state.session) return; // a later HAI (none expected without resumption)
  state.session = env.session;
  state.lastSeq = Number(env.seq) || 0;
  const fc = (p.capabilities || {}).flow_control;
  state.credit = fc && Number.isFinite(fc.initial_credit_messages)
    ? { initial: { messages: fc.initial_credit_messages, bytes: fc.initial_credit_bytes ?? Infinity } }
    : null;
  $('auth').hidden = true;
  setStatus('open', `connected · session ${state.session.slice(0, 8)}`);
  send('HAI', 'SYSTEM', clientHai());
  send('TOOL_LIST', 'USER', {});
}

function onFlowUpdate(p) {
  if (!state.credit || typeof p.channel !== 'string') return;
  const credit = creditOf(p.channel);
  if (Number.isFinite(p.add_messages) && p.add_messages > 0) credit.messages += p.add_messages;
  if (Number.isFinite(p.add_bytes) && p.add_bytes > 0) credit.bytes += p.add_bytes;
  flush();
}

function onError(p) {
  if (AUTH_CODES.includes(p.code)) {
    showAuth(authMessage(p.code));
    return;
  }
  const asked = p.related_id && state.pending.get(p.related_id);
  if (asked && asked.kind === 'schema') {
    state.pending.delete(p.related_id);
    if (state.selected === asked.tool) $('tool-description').textContent = `${p.code}: ${p.message}`;
    return;
  }
  if (asked && asked.kind === 'answer') {
    state.pending.delete(p.related_id);
    const q = state.questions.get(asked.requestId);
    if (q) answerRefused(q, p);
    return;
  }
  if (asked && asked.kind === 'call' && p.code === 'TOOL_NOT_FOUND') return; // its TOOL_DONE says it
  showError(`${p.code || 'ERROR'}: ${p.message || ''}${p.detail ? `\n${pretty(p.detail)}` : ''}`);
}
