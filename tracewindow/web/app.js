// StackSaga Trace Window: a single page over the JSON API next to it
// (api/...). Plain JavaScript, no dependencies, no build step.
(function () {
  'use strict';

  var TOKEN_KEY = 'stacksaga-trace-window-token';
  var S = {
    config: null,
    token: '',
    timer: 0,        // the pending refresh of the current view
    healthTimer: 0,
    seq: 0,          // increments on every navigation; stale responses are dropped
  };
  try { S.token = window.sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { S.token = ''; }

  // ---- DOM helpers -------------------------------------------------------

  function el(tag, attrs) {
    var n = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v === undefined || v === null || v === false) return;
        if (k === 'text') n.textContent = String(v);
        else if (k === 'class') n.className = v;
        else if (k.slice(0, 2) === 'on') n.addEventListener(k.slice(2), v);
        else n.setAttribute(k, v === true ? '' : String(v));
      });
    }
    for (var i = 2; i < arguments.length; i++) append(n, arguments[i]);
    return n;
  }
  function append(n, c) {
    if (c === undefined || c === null || c === false) return;
    if (Array.isArray(c)) { c.forEach(function (x) { append(n, x); }); return; }
    n.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  function $(id) { return document.getElementById(id); }
  function clear(n) { while (n.firstChild) n.removeChild(n.firstChild); }

  // ---- formatting --------------------------------------------------------

  function pad(n, w) { n = String(n); while (n.length < (w || 2)) n = '0' + n; return n; }
  function fmtTime(iso) {
    if (!iso) return '—';
    var d = new Date(iso);
    if (isNaN(d.getTime()) || d.getTime() <= 0) return '—';
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + '.' + pad(d.getMilliseconds(), 3);
  }
  function fmtDur(ms) {
    ms = Math.max(0, Math.round(ms || 0));
    if (ms < 1000) return ms + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(2) + ' s';
    if (ms < 3600000) return Math.floor(ms / 60000) + 'm ' + pad(Math.floor(ms / 1000) % 60) + 's';
    return Math.floor(ms / 3600000) + 'h ' + pad(Math.floor(ms / 60000) % 60) + 'm';
  }
  function toLocalInput(iso) {
    var d = new Date(iso);
    if (isNaN(d.getTime())) return '';
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + 'T' + pad(d.getHours()) + ':' + pad(d.getMinutes());
  }
  function fromLocalInput(v) {
    if (!v) return '';
    var d = new Date(v);
    return isNaN(d.getTime()) ? '' : d.toISOString();
  }
  function stateBadge(s) { return el('span', { class: 'state ' + s, text: s }); }
  function pretty(raw) {
    try { return JSON.stringify(raw, null, 2); } catch (e) { return String(raw); }
  }
  function sagaHref(id) { return '#/saga/' + encodeURIComponent(id); }

  // ---- API ---------------------------------------------------------------

  // api fetches api/<path>, sending the bearer token the user gave (a read
  // token, or the admin token, which reads too). A read refused with 401
  // asks for a token and starts the page again with it.
  function api(path, opts) {
    opts = opts || { headers: { 'Accept': 'application/json' } };
    if (S.token) {
      var h = {};
      Object.keys(opts.headers || {}).forEach(function (k) { h[k] = opts.headers[k]; });
      h['Authorization'] = 'Bearer ' + S.token;
      opts.headers = h;
    }
    return fetch('api/' + path, opts).then(function (res) {
      return res.text().then(function (text) {
        var body = null;
        try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
        if (!res.ok) {
          var err = new Error((body && body.error) || (res.status + ' ' + res.statusText));
          err.status = res.status;
          err.body = body;
          if (res.status === 401 && (!opts.method || opts.method === 'GET')) askReadToken();
          throw err;
        }
        return body;
      });
    });
  }

  function flash(msg, bad) {
    var f = $('flash');
    f.textContent = msg;
    f.className = 'flash' + (bad ? ' bad' : '');
    f.hidden = false;
    clearTimeout(flash.t);
    flash.t = setTimeout(function () { f.hidden = true; }, bad ? 12000 : 6000);
  }

  function schedule(fn, ms) {
    clearTimeout(S.timer);
    S.timer = setTimeout(fn, ms);
  }

  // ---- routing -----------------------------------------------------------

  function parseHash() {
    var h = location.hash.replace(/^#/, '');
    if (h.indexOf('/saga/') === 0) return { view: 'saga', id: decodeURIComponent(h.slice(6)) };
    var q = h.indexOf('?');
    return { view: 'list', params: new URLSearchParams(q >= 0 ? h.slice(q + 1) : '') };
  }

  function route() {
    clearTimeout(S.timer);
    S.seq++;
    var r = parseHash();
    var view = $('view');
    if (r.view === 'saga') showSaga(view, r.id, S.seq, true);
    else showList(view, r.params, S.seq);
  }

  // ---- header: scope, search, admin token ----------------------------------

  function initHeader() {
    var c = S.config;
    $('scope').textContent = c.scope.region + ' / ' + c.scope.cluster + ' / ' + c.scope.service;
    document.title = c.scope.service + ' · Trace Window';
    $('search').addEventListener('submit', function (ev) {
      ev.preventDefault();
      var id = $('search-tx').value.trim();
      if (!id) return;
      api('search?tx=' + encodeURIComponent(id)).then(function (doc) {
        location.hash = sagaHref(doc.saga.tx_id);
      }).catch(function (err) { flash(err.message, true); });
    });
    if (c.admin_actions.length > 0) {
      var btn = $('admin-btn');
      btn.hidden = false;
      btn.textContent = S.token ? 'Admin token set' : 'Admin token';
      btn.addEventListener('click', function () { showTokenPanel(); });
    }
  }

  // initTokenPanel wires the token form; it runs before the configuration is
  // read, since reading it may already need a token.
  function initTokenPanel() {
    $('token-form').addEventListener('submit', function (ev) {
      ev.preventDefault();
      setToken($('token-input').value.trim());
      $('token-panel').hidden = true;
      if (S.afterToken) { var f = S.afterToken; S.afterToken = null; f(); }
    });
    $('token-forget').addEventListener('click', function () { setToken(''); $('token-panel').hidden = true; });
    $('token-cancel').addEventListener('click', function () { S.afterToken = null; $('token-panel').hidden = true; });
  }

  // askReadToken shows the token panel after a refused read; the page starts
  // again once a token is given.
  function askReadToken() {
    if (!$('token-panel').hidden) return;
    if (S.token) setToken(''); // it was refused
    $('token-label').textContent = 'This Trace Window needs a bearer token to read (kept in this tab only, never in a cookie)';
    S.afterToken = function () { location.reload(); };
    showTokenPanel();
  }

  function showTokenPanel() {
    $('token-input').value = S.token;
    $('token-panel').hidden = false;
    $('token-input').focus();
  }

  function setToken(t) {
    S.token = t;
    try {
      if (t) window.sessionStorage.setItem(TOKEN_KEY, t); else window.sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage unavailable: keep it in memory */ }
    $('admin-btn').textContent = t ? 'Admin token set' : 'Admin token';
  }

  // ---- health ------------------------------------------------------------

  function loadHealth() {
    clearTimeout(S.healthTimer);
    api('health').then(renderHealth).catch(function (err) {
      var box = $('health');
      clear(box);
      box.appendChild(el('span', { class: 'chip bad', text: 'health unavailable: ' + err.message }));
    }).then(function () {
      S.healthTimer = setTimeout(loadHealth, document.hidden ? 30000 : 5000);
    });
  }

  function chip(label, value, cls, title) {
    return el('span', { class: 'chip' + (cls ? ' ' + cls : ''), title: title }, el('b', { text: value }), label);
  }

  function renderHealth(h) {
    var box = $('health');
    clear(box);
    box.appendChild(chip('in flight', h.in_flight, '', 'sagas created in the health window that are not terminal nor DISABLED'));
    if (h.oldest_in_flight) {
      var o = h.oldest_in_flight;
      box.appendChild(el('span', { class: 'chip' + (o.age_ms > 600000 ? ' warn' : ''), title: 'the oldest saga in flight' },
        'oldest in flight', el('b', { text: fmtDur(o.age_ms) }),
        el('a', { href: sagaHref(o.tx_id), class: 'mono', text: o.tx_id.slice(0, 13) + '…' })));
    }
    box.appendChild(chip('retry pending', h.retry_pending, h.retry_pending ? 'warn' : ''));
    box.appendChild(chip('retries registered', h.retry_registered + (h.retry_registered_truncated ? '+' : ''), '',
      'RETRY_PENDING sagas with a retry registered in the recovery directory'));
    box.appendChild(chip('frozen', h.frozen, h.frozen ? 'warn' : '', 'rows of the frozen table'));
    box.appendChild(chip('disabled', h.disabled, h.disabled ? 'bad' : ''));
    box.appendChild(chip('compensation failed', h.compensation_failed, h.compensation_failed ? 'bad' : '', 'COMPENSATION_FAILED'));
    var doms = Object.keys(h.by_domain || {}).sort();
    if (doms.length) {
      var rows = doms.map(function (d) {
        var counts = h.by_domain[d];
        var parts = Object.keys(counts).sort().map(function (s) { return s + ' ' + counts[s]; });
        return el('tr', null, el('td', { text: d }), el('td', { class: 'mono', text: parts.join(' · ') }));
      });
      box.appendChild(el('details', null,
        el('summary', { text: 'by domain and state (created in the last ' + fmtDur(new Date(h.to) - new Date(h.from)) + ')' + (h.index && h.index.truncated ? ' — partial: the newest sagas only' : '') }),
        el('table', null, el('tbody', null, rows))));
    }
    if (h.errors && h.errors.length) {
      box.appendChild(el('span', { class: 'chip bad', title: h.errors.join('\n'), text: h.errors.length + ' health part(s) unavailable' }));
    }
  }

  // ---- list view -----------------------------------------------------------

  var IN_FLIGHT = 'in_flight';

  function showList(view, params, seq) {
    clear(view);
    if (!S.config.index) {
      view.appendChild(el('div', { class: 'panel' },
        el('h2', { text: 'Find a saga' }),
        el('p', { class: 'muted', text: 'This Trace Window has no listing index: find sagas by transaction id with the search box above.' })));
      return;
    }
    var filters = el('form', { class: 'filters panel', id: 'filters' });
    var domainSel = el('select', { id: 'f-domain', name: 'domain' }, el('option', { value: '', text: 'All domains' }));
    var stateSel = el('select', { id: 'f-state', name: 'state' },
      el('option', { value: '', text: 'Any state' }),
      el('option', { value: IN_FLIGHT, text: 'In flight (not ended)', title: 'every state but COMPLETED, COMPENSATED, COMPENSATION_FAILED and TERMINATED; DISABLED included' }),
      S.config.states.map(function (s) { return el('option', { value: s, text: s }); }));
    var from = el('input', { id: 'f-from', name: 'from', type: 'datetime-local' });
    var to = el('input', { id: 'f-to', name: 'to', type: 'datetime-local' });
    var limit = el('select', { id: 'f-limit', name: 'limit' }, [20, 50, 100, 200].map(function (n) {
      return el('option', { value: n, text: n + ' per page' });
    }));
    var auto = el('input', { id: 'f-auto', type: 'checkbox' });
    auto.checked = params.get('auto') !== '0';
    stateSel.value = params.get('state') || '';
    limit.value = params.get('limit') || '50';
    if (params.get('from')) from.value = toLocalInput(params.get('from'));
    if (params.get('to')) to.value = toLocalInput(params.get('to'));
    append(filters, [
      el('label', { class: 'grow' }, 'Domain', domainSel),
      el('label', null, 'State', stateSel),
      el('label', null, 'Created from', from),
      el('label', null, 'to', to),
      el('label', null, 'Page', limit),
      el('label', { class: 'check' }, auto, 'auto-refresh'),
      el('button', { type: 'submit', class: 'primary', id: 'f-apply', text: 'Apply' }),
      el('button', { type: 'button', id: 'f-reset', text: 'Last 24 h', onclick: function () { location.hash = '#/'; } }),
    ]);
    function submit(ev) {
      if (ev) ev.preventDefault();
      var p = new URLSearchParams();
      if (domainSel.value) p.set('domain', domainSel.value);
      if (stateSel.value) p.set('state', stateSel.value);
      if (from.value) p.set('from', fromLocalInput(from.value));
      if (to.value) p.set('to', fromLocalInput(to.value));
      if (limit.value !== '50') p.set('limit', limit.value);
      if (!auto.checked) p.set('auto', '0');
      var h = '#/?' + p.toString();
      if (location.hash === h) route(); else location.hash = h;
    }
    filters.addEventListener('submit', submit);
    stateSel.addEventListener('change', submit);
    domainSel.addEventListener('change', submit);
    auto.addEventListener('change', submit);
    var results = el('div', { class: 'panel', id: 'results' }, el('p', { class: 'muted', text: 'Loading…' }));
    append(view, [filters, results]);

    api('domains').then(function (doc) {
      if (seq !== S.seq) return;
      doc.domains.forEach(function (d) { domainSel.appendChild(el('option', { value: d, text: d })); });
      domainSel.value = params.get('domain') || '';
    }).catch(function (err) { flash('domains: ' + err.message, true); });

    loadList(results, params, seq, auto);
  }

  function listQuery(params) {
    var p = new URLSearchParams();
    ['domain', 'state', 'from', 'to', 'after', 'limit'].forEach(function (k) {
      if (params.get(k)) p.set(k, params.get(k));
    });
    return p;
  }

  function loadList(box, params, seq, auto) {
    api('sagas?' + listQuery(params).toString()).then(function (doc) {
      if (seq !== S.seq) return;
      renderList(box, doc, params);
      if (auto.checked && !params.get('after')) {
        schedule(function () { if (seq === S.seq) loadList(box, params, seq, auto); }, 5000);
      }
    }).catch(function (err) {
      if (seq !== S.seq) return;
      clear(box);
      box.appendChild(el('div', { class: 'error-box', text: err.message }));
    });
  }

  function renderList(box, doc, params) {
    clear(box);
    var q = doc.query;
    box.appendChild(el('p', { class: 'muted', id: 'list-summary' },
      doc.sagas.length + ' saga' + (doc.sagas.length === 1 ? '' : 's') + ' created ' + fmtTime(q.from) + ' – ' + fmtTime(q.to) +
      (q.states && q.states.length ? ' in ' + q.states.join(', ') : '') + ', newest first'));
    if (doc.sagas.length) {
      var rows = doc.sagas.map(function (s) {
        return el('tr', { 'data-tx': s.tx_id, 'data-state': s.state },
          el('td', { 'data-label': 'Saga', class: 'mono' }, el('a', { href: sagaHref(s.tx_id), class: 'saga-link', text: s.tx_id })),
          el('td', { 'data-label': 'Domain', text: s.domain }),
          el('td', { 'data-label': 'Definition', class: 'def-version', text: s.definition_version ? 'v' + s.definition_version : '—' }),
          el('td', { 'data-label': 'State' }, stateBadge(s.state)),
          el('td', { 'data-label': 'Step', class: 'mono', text: s.endpoint ? (s.kind === 'revert' ? '↩ ' : '') + s.span + ' ' + s.endpoint : '—' }),
          el('td', { 'data-label': 'Created', class: 'nowrap', text: fmtTime(s.created_at) }),
          el('td', { 'data-label': s.state === 'COMPLETED' || s.state === 'COMPENSATED' || s.state === 'COMPENSATION_FAILED' ? 'Took' : 'Age', class: 'nowrap', text: fmtDur(s.duration_ms) }),
          el('td', { 'data-label': 'Error', class: 'err', title: s.error || '', text: s.error || '' }));
      });
      box.appendChild(el('table', { class: 'sagas', id: 'saga-table' },
        el('thead', null, el('tr', null, ['Transaction', 'Domain', 'Definition', 'State', 'Step', 'Created', 'Duration', 'Last error'].map(function (t) { return el('th', { text: t }); }))),
        el('tbody', null, rows)));
    } else {
      box.appendChild(el('p', { id: 'empty', text: doc.next ? 'No saga in this part of the range; look further back.' : 'No saga matches.' }));
    }
    var pager = el('div', { class: 'pager' });
    if (params.get('after')) {
      pager.appendChild(el('button', { type: 'button', text: '⇤ Newest', onclick: function () { navList(params, ''); } }));
    }
    if (doc.next) {
      pager.appendChild(el('button', { type: 'button', id: 'older', text: 'Older →', onclick: function () { navList(params, doc.next); } }));
    }
    pager.appendChild(el('span', { class: 'muted', text: doc.scanned + ' index rows read' }));
    box.appendChild(pager);
  }

  function navList(params, after) {
    var p = new URLSearchParams(params.toString());
    if (after) p.set('after', after); else p.delete('after');
    location.hash = '#/?' + p.toString();
  }

  // ---- saga view -----------------------------------------------------------

  function showSaga(view, id, seq, first) {
    if (first) {
      clear(view);
      view.appendChild(el('p', { class: 'muted', text: 'Loading saga ' + id + '…' }));
    }
    api('sagas/' + encodeURIComponent(id)).then(function (d) {
      if (seq !== S.seq) return;
      renderSaga(view, d);
      if (d.refresh) {
        schedule(function () { if (seq === S.seq) showSaga(view, id, seq, false); }, S.config.refresh_ms || 2000);
      }
    }).catch(function (err) {
      if (seq !== S.seq) return;
      clear(view);
      view.appendChild(el('div', { class: 'panel' },
        el('h2', { text: err.status === 404 ? 'Saga not found' : 'Could not load the saga' }),
        el('div', { class: 'error-box', text: err.message }),
        el('p', null, el('a', { href: '#/', text: '← back to the list' }))));
    });
  }

  function renderSaga(view, d) {
    // Keep open step panels and the scroll position across refreshes.
    var open = {};
    Array.prototype.forEach.call(view.querySelectorAll('details[open][id]'), function (n) { open[n.id] = true; });
    var y = window.scrollY;
    clear(view);
    var s = d.saga;
    var head = el('div', { class: 'panel', id: 'saga-head' },
      el('p', { class: 'muted' }, el('a', { href: '#/', text: '← sagas' })),
      el('h1', { class: 'mono', id: 'saga-id', text: s.tx_id }),
      el('div', null, stateBadge(s.state), ' ', el('span', { class: 'muted', text: s.domain }),
        d.refresh ? el('span', { class: 'muted', id: 'live', text: ' · live, refreshing' }) : null),
      el('dl', { class: 'facts' },
        fact('Created', fmtTime(s.created_at)),
        fact('Updated', fmtTime(s.updated_at)),
        fact(d.timings.ended_at ? 'Took' : 'Age', fmtDur(d.timings.total_ms), 'saga-total'),
        fact('Forward steps', fmtDur(d.timings.forward_ms)),
        fact('Compensation', fmtDur(d.timings.compensation_ms)),
        fact('Waiting (retries, pauses)', fmtDur(d.timings.waiting_ms)),
        fact('Attempts', d.timings.attempts),
        fact('Current step', s.endpoint ? (s.kind === 'revert' ? '↩ ' : '') + 'span ' + s.span + ' ' + s.endpoint + ' (attempt ' + s.attempt + ')' : '—'),
        fact('Definition version', s.definition_version, 'saga-definition-version'),
        fact('Version', s.version),
        s.lifetime_start ? fact('Lifetime since', fmtTime(s.lifetime_start)) : null,
        s.paused_until ? fact('Paused until', fmtTime(s.paused_until)) : null,
        s.restore_watchdog ? fact('Restore watchdog', (s.restore_watchdog.window_start ? 'due ' + fmtTime(s.restore_watchdog.window_start) + ' – ' + fmtTime(s.restore_watchdog.window_end) : s.restore_watchdog.day + ' slot ' + s.restore_watchdog.minute_of_day) + ' · bucket ' + s.restore_watchdog.bucket, 'saga-watchdog') : null,
        s.frozen ? fact('Frozen', fmtTime(s.frozen.frozen_at) + ' as ' + s.frozen.state) : null,
        s.trace_id ? fact('Trace id', s.trace_id, 'saga-trace-id') : null,
        traceLink(s)),
      s.error ? el('div', { class: 'error-box', id: 'saga-error', text: s.error }) : null,
      s.last_error ? el('div', { class: 'muted', id: 'saga-last-error', text: 'history: an earlier attempt failed with "' + s.last_error + '"; the saga went on (see its steps)' }) : null,
      s.frozen && s.frozen.reason && s.frozen.reason !== s.error ? el('div', { class: 'error-box', text: 'frozen: ' + s.frozen.reason }) : null,
      actionButtons(d));
    view.appendChild(head);
    view.appendChild(timelinePanel(d));
    view.appendChild(auditPanel(d));
    view.appendChild(el('div', { class: 'two grid-gap' }, compensationPanel(d), retryPanel(d)));
    view.appendChild(stepsPanel(d, open));
    view.appendChild(entityPanel(s));
    window.scrollTo(0, y);
  }

  function fact(k, v, id) {
    return el('div', null, el('dt', { text: k }), el('dd', { id: id }, v));
  }

  function traceLink(s) {
    var href = s.trace_url;
    if (!href || !/^https?:\/\//i.test(href)) return null;
    return el('div', null, el('dt', { text: 'Trace' }), el('dd', null, el('a', { id: 'saga-trace-link', href: href, target: '_blank', rel: 'noopener noreferrer', text: 'open in tracing UI' })));
  }

  function actionButtons(d) {
    if (!d.actions || !d.actions.length) return null;
    var labels = { restore: 'Restore (hand back to retry nodes)', redrive: 'Re-drive now', resend: 'Re-send step', resume: 'Resume', cancel: 'Cancel (compensate)', terminate: 'Terminate (no compensation)' };
    return el('div', { class: 'actions' }, d.actions.map(function (a) {
      return el('button', { type: 'button', class: 'danger', 'data-action': a, text: labels[a] || a, onclick: function () { runAction(d.saga.tx_id, a); } });
    }));
  }

  function runAction(id, action) {
    if (!S.token) {
      S.afterToken = function () { runAction(id, action); };
      showTokenPanel();
      return;
    }
    var body = {};
    if (action === 'resume') {
      var key = window.prompt('Correlation key of the paused span:');
      if (!key) return;
      var ctx = window.prompt('Resume context (JSON):', '{}');
      if (ctx === null) return;
      try { body = { correlation_key: key, context: JSON.parse(ctx || '{}') }; } catch (e) { flash('resume context is not JSON: ' + e.message, true); return; }
    } else if (action === 'cancel' || action === 'terminate') {
      var reason = window.prompt(action + ' saga ' + id + ': why? (recorded in its history)');
      if (reason === null || !reason.trim()) return;
      body = { reason: reason };
    } else if (!window.confirm(action + ' saga ' + id + '?')) {
      return;
    }
    api('sagas/' + encodeURIComponent(id) + '/' + action, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Authorization': 'Bearer ' + S.token, 'Accept': 'application/json' },
      body: JSON.stringify(body),
      credentials: 'omit',
    }).then(function (doc) {
      var unaudited = doc.audit && doc.audit !== 'recorded';
      flash(action + ' done' + (doc.saga ? ': the saga is ' + doc.saga.state : '') + (unaudited ? ' · audit ' + doc.audit : ''), unaudited);
      route();
    }).catch(function (err) {
      if (err.status === 401) setToken('');
      var audit = err.body && err.body.audit;
      flash(action + ' failed: ' + err.message + (audit && audit !== 'recorded' ? ' · audit ' + audit : ''), true);
      if (audit) route(); // the refusal is in the saga's audit trail
    });
  }

  // ---- timeline --------------------------------------------------------------

  var CATS = [
    ['forward', 'forward step'], ['revert', 'compensation'], ['retry', 'failed, retried'], ['wait', 'waiting for retry'],
    ['failed', 'failed'], ['pause', 'paused'], ['running', 'in flight'],
  ];

  function timelinePanel(d) {
    var tl = d.timeline;
    var panel = el('div', { class: 'panel' }, el('h2', { text: 'Timeline' }));
    if (!tl.lanes.length) {
      panel.appendChild(el('p', { class: 'muted', text: 'No step has run yet.' }));
      return panel;
    }
    var t0 = new Date(tl.start).getTime();
    var total = Math.max(new Date(tl.end).getTime() - t0, 1);
    var ticks = el('div', { class: 'tl-ticks' });
    [0, 0.25, 0.5, 0.75, 1].forEach(function (f) {
      var t = el('span', { text: '+' + fmtDur(total * f) });
      t.style.left = (f * 100) + '%';
      ticks.appendChild(t);
    });
    var box = el('div', { class: 'timeline', id: 'timeline' },
      el('div', { class: 'tl-axis' }, el('span', { text: 'step' }), ticks));
    tl.lanes.forEach(function (l, i) {
      var track = el('div', { class: 'tl-track' });
      l.segments.forEach(function (sg) {
        var start = new Date(sg.start).getTime() - t0;
        var dur = Math.max(new Date(sg.end).getTime() - new Date(sg.start).getTime(), 0);
        var seg = el('button', {
          type: 'button', class: 'tl-seg seg-' + sg.category, 'data-category': sg.category,
          'data-duration-ms': sg.duration_ms, 'data-index': sg.index || null,
          title: sg.label + (sg.error ? '\n' + sg.error : ''), 'aria-label': sg.label, text: sg.label,
          onclick: function () { openStep(sg.index); },
        });
        seg.style.left = Math.min(start / total * 100, 99.5) + '%';
        seg.style.width = Math.max(dur / total * 100, 0.5) + '%';
        track.appendChild(seg);
      });
      var rev = l.kind === 'revert';
      box.appendChild(el('div', {
        class: 'tl-row', id: 'lane-' + i, 'data-kind': l.kind, 'data-span': l.span, 'data-endpoint': l.endpoint,
        'data-outcome': l.outcome, 'data-duration-ms': l.duration_ms,
      },
      el('div', { class: 'tl-label', title: l.endpoint },
        el('span', { class: 'kind', text: rev ? '↩ ' + l.span : '→ ' + l.span }),
        el('span', { class: 'name', text: epName(l.endpoint) }),
        el('span', { class: 'svc', text: epService(l.endpoint) }),
        el('span', { class: 'tl-dur', text: fmtDur(l.duration_ms) + (l.attempts > 1 ? ' · ' + l.attempts + ' attempts' : '') + (l.outcome && l.outcome !== 'ok' ? ' · ' + l.outcome : '') })),
      track));
    });
    if (d.audit && d.audit.length) box.appendChild(auditLane(d.audit, t0, total));
    panel.appendChild(box);
    panel.appendChild(el('div', { class: 'legend' }, CATS.map(function (c) {
      return el('span', null, el('i', { class: 'seg-' + c[0] }), c[1]);
    }), d.audit && d.audit.length ? el('span', null, el('i', { class: 'tl-mark-key' }), 'admin action') : null));
    return panel;
  }

  // auditLane is the timeline's row of admin actions: a marker at the time
  // of each (one before or after the chart's range sits at its edge).
  function auditLane(audit, t0, total) {
    var track = el('div', { class: 'tl-track tl-marks' });
    audit.forEach(function (a, i) {
      var f = (new Date(a.at).getTime() - t0) / total;
      var out = f < 0 || f > 1;
      var label = fmtTime(a.at) + ' · ' + a.actor + ' · ' + a.action + ' · ' + a.result;
      var m = el('button', {
        type: 'button', class: 'tl-mark ' + resultClass(a.result) + (out ? ' tl-mark-out' : ''),
        'data-action': a.action, 'data-result': a.result, title: label, 'aria-label': label,
        onclick: function () { openAudit(i); },
      });
      m.style.left = Math.min(Math.max(f, 0), 1) * 100 + '%';
      track.appendChild(m);
    });
    return el('div', { class: 'tl-row tl-audit', id: 'audit-lane' },
      el('div', { class: 'tl-label' }, el('span', { class: 'kind', text: 'admin' }),
        el('span', { class: 'name', text: audit.length + (audit.length === 1 ? ' action' : ' actions') })),
      track);
  }

  // resultClass maps an audit result to its colour class.
  function resultClass(r) {
    if (r === 'ok') return 'ok';
    return r.indexOf('refused') === 0 ? 'refused' : 'failed';
  }

  function openAudit(i) {
    var n = $('audit-row-' + i);
    if (!n) return;
    n.classList.add('flash-target');
    setTimeout(function () { n.classList.remove('flash-target'); }, 1500);
    n.scrollIntoView({ behavior: 'smooth', block: 'center' });
  }

  // ---- admin audit trail -------------------------------------------------------

  function auditPanel(d) {
    var p = el('div', { class: 'panel', id: 'audit' }, el('h2', { text: 'Admin audit' }));
    if (d.audit_unavailable) p.appendChild(el('p', { class: 'muted', id: 'audit-unavailable', text: d.audit_unavailable }));
    if (!d.audit || !d.audit.length) {
      if (!d.audit_unavailable) p.appendChild(el('p', { class: 'muted', text: 'No admin action on this saga.' }));
      return p;
    }
    if (d.audit_more) p.appendChild(el('p', { class: 'muted', text: 'The latest ' + d.audit.length + ' actions (older ones are in the store).' }));
    p.appendChild(el('table', { class: 'audit' },
      el('thead', null, el('tr', null, ['When', 'Who', 'Action', 'Result'].map(function (t) { return el('th', { text: t }); }))),
      el('tbody', null, d.audit.map(function (a, i) {
        return el('tr', { id: 'audit-row-' + i, 'data-action': a.action, 'data-result': a.result, 'data-actor': a.actor },
          el('td', { class: 'nowrap', text: fmtTime(a.at) }),
          el('td', { class: 'actor', text: a.actor }),
          el('td', null, el('b', { text: a.action }), a.detail ? el('div', { class: 'muted detail', text: a.detail }) : null),
          el('td', null, el('span', { class: 'outcome ' + resultClass(a.result), text: a.result }),
            a.error ? el('div', { class: 'error-box', text: a.error }) : null,
            a.error_withheld ? el('div', { class: 'muted', text: 'error kept in the store and the server log' }) : null));
      }))));
    return p;
  }

  // "service/endpoint[#query]" -> its parts.
  function epName(q) { var i = q.indexOf('/'); return (i >= 0 ? q.slice(i + 1) : q).replace(/#query$/, ' (query)'); }
  function epService(q) { var i = q.indexOf('/'); return i >= 0 ? q.slice(0, i) : ''; }

  function openStep(index) {
    if (!index) return;
    var n = $('step-' + index);
    if (!n) return;
    n.open = true;
    n.classList.add('flash-target');
    setTimeout(function () { n.classList.remove('flash-target'); }, 1500);
    n.scrollIntoView({ behavior: 'smooth', block: 'start' });
  }

  // ---- compensation trail and retry audit ---------------------------------------

  function compensationPanel(d) {
    var c = d.compensation;
    var p = el('div', { class: 'panel', id: 'compensation' }, el('h2', { text: 'Compensation trail' }));
    if (!c.triggered) {
      p.appendChild(el('p', { class: 'muted', text: 'No compensation: every step went forward.' }));
      return p;
    }
    if (c.trigger) {
      p.appendChild(el('p', null, 'Started by ', el('b', { text: 'span ' + c.trigger.span + ' ' + (c.trigger.endpoint || '') }),
        ' (' + c.trigger.outcome + (c.trigger.attempt ? ', attempt ' + c.trigger.attempt : '') + ') at ' + fmtTime(c.trigger.at)));
      if (c.trigger.error) p.appendChild(el('div', { class: 'error-box', text: c.trigger.error }));
    }
    if (c.steps.length) {
      p.appendChild(el('ol', { class: 'trail', id: 'trail' }, c.steps.map(function (s) {
        return el('li', { 'data-endpoint': s.endpoint, 'data-outcome': s.outcome },
          '↩ span ' + s.span + ' ', el('b', { text: s.endpoint }), ' — ',
          el('span', { class: 'outcome ' + s.outcome, text: s.outcome }),
          ' · ' + fmtDur(s.duration_ms) + (s.attempts > 1 ? ' · ' + s.attempts + ' attempts' : ''),
          s.error ? el('div', { class: 'error-box', text: s.error }) : null);
      })));
    } else {
      p.appendChild(el('p', { class: 'muted', text: 'No compensation ran (nothing compensable had completed).' }));
    }
    if (c.pending && c.pending.length) {
      p.appendChild(el('p', { class: 'muted', text: 'Still to compensate: ' + c.pending.map(function (x) { return 'span ' + x.span + ' ' + x.endpoint; }).join(', ') }));
    }
    if (c.result) {
      p.appendChild(el('p', null, 'Result: ', el('span', { class: 'outcome ' + (c.result === 'compensated' ? 'ok' : c.result === 'compensation_failed' ? 'failed' : 'running'), text: c.result.replace('_', ' ') })));
    }
    return p;
  }

  function retryPanel(d) {
    var p = el('div', { class: 'panel', id: 'retries' }, el('h2', { text: 'Retry audit' }));
    if (!d.retries.length) {
      p.appendChild(el('p', { class: 'muted', text: 'No retries: every step ran once.' }));
      return p;
    }
    d.retries.forEach(function (r) {
      p.appendChild(el('p', null, el('b', { text: (r.kind === 'revert' ? '↩ ' : '') + 'span ' + r.span + ' ' + r.endpoint })));
      p.appendChild(el('table', null,
        el('thead', null, el('tr', null, ['#', 'Outcome', 'Started', 'Took', 'Waited before', 'Node'].map(function (t) { return el('th', { text: t }); }))),
        el('tbody', null, r.attempts.map(function (a) {
          return el('tr', { title: a.error || '' },
            el('td', { text: a.attempt }),
            el('td', null, el('span', { class: 'outcome ' + a.outcome, text: a.outcome })),
            el('td', { class: 'nowrap', text: fmtTime(a.started_at) }),
            el('td', { text: fmtDur(a.duration_ms) }),
            el('td', { text: a.wait_before_ms ? fmtDur(a.wait_before_ms) : '—' }),
            el('td', { class: 'muted', text: a.node || 'not recorded' }));
        }))));
    });
    return p;
  }

  // ---- steps with entity snapshots -------------------------------------------------

  function changedKeys(before, after) {
    if (!before || !after || typeof before !== 'object' || typeof after !== 'object') return [];
    var keys = {};
    Object.keys(before).concat(Object.keys(after)).forEach(function (k) { keys[k] = true; });
    return Object.keys(keys).filter(function (k) { return JSON.stringify(before[k]) !== JSON.stringify(after[k]); });
  }

  function stepsPanel(d, open) {
    var p = el('div', { class: 'panel', id: 'steps' }, el('h2', { text: 'Steps (' + d.steps.length + ' attempts recorded)' }));
    if (!d.steps.length) {
      p.appendChild(el('p', { class: 'muted', text: 'No step result recorded yet.' }));
    }
    d.steps.forEach(function (s) {
      var id = 'step-' + s.index;
      var ch = changedKeys(s.before, s.after);
      p.appendChild(el('details', { class: 'step', id: id, open: !!open[id] },
        el('summary', null,
          el('span', { class: 'mono', text: '#' + s.index }),
          el('b', { text: (s.kind === 'revert' ? '↩ ' : '→ ') + 'span ' + s.span + ' ' + s.endpoint }),
          el('span', { text: 'attempt ' + s.attempt }),
          el('span', { class: 'outcome ' + s.outcome, text: s.outcome }),
          el('span', { class: 'muted', text: fmtDur(s.duration_ms) + ' · ' + fmtTime(s.started_at) })),
        el('div', { class: 'step-body' },
          s.error ? el('div', { class: 'error-box', text: s.error }) : null,
          ch.length ? el('p', { class: 'changed', text: 'changed: ' + ch.join(', ') }) : null,
          el('div', { class: 'snapshots' },
            el('div', null, el('h4', { text: 'Entity before' }), el('pre', { class: 'json', text: pretty(s.before) })),
            el('div', null, el('h4', { text: 'Entity after' }), el('pre', { class: 'json', text: pretty(s.after) }))),
          s.resume_context ? el('div', null, el('h4', { text: 'Resume context' }), el('pre', { class: 'json', text: pretty(s.resume_context) })) : null)));
    });
    return p;
  }

  function entityPanel(s) {
    var p = el('div', { class: 'panel', id: 'entity' }, el('h2', { text: 'Entity now' }),
      el('pre', { class: 'json', text: pretty(s.entity) }));
    if (s.completed && s.completed.length) {
      p.appendChild(el('p', { class: 'muted', text: 'Completed forward steps: ' + s.completed.map(function (c) {
        return c.span + ' ' + c.endpoint + (c.compensable ? '' : ' (query)');
      }).join(', ') }));
    }
    if (s.hints && Object.keys(s.hints).length) {
      p.appendChild(el('h4', { text: 'Revert hints' }));
      p.appendChild(el('pre', { class: 'json', text: pretty(s.hints) }));
    }
    return p;
  }

  // ---- start ------------------------------------------------------------------

  function start() {
    initTokenPanel();
    api('config').then(function (c) {
      S.config = c;
      initHeader();
      window.addEventListener('hashchange', route);
      document.addEventListener('visibilitychange', function () { if (!document.hidden) loadHealth(); });
      loadHealth();
      route();
    }).catch(function (err) {
      var v = $('view');
      clear(v);
      v.appendChild(el('div', { class: 'error-box', text: 'Could not load the Trace Window configuration: ' + err.message }));
    });
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
