// The admin listener's deployments page (SPEC §11): every deployment with its project, kind, server, status and
// reason, its URLs, ready-to-run curl, Python and OpenAI-SDK snippets with copy buttons, live requests/s, share of
// 5xx and p99 (polled from /api/stats), and a filter box. One self-contained document: no external assets.
import type { DeploymentStatus, KeyProblem, Route } from '../routing/types.js';

const esc = (s: unknown): string =>
  String(s ?? '').replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );

/** A shell-quoted word ('...' with ' escaped). */
const sq = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

export interface Snippets {
  curl: string;
  python: string;
  openai?: string;
}

const KEY_HEADER = '-H "authorization: ApiKey $SERVEGATE_KEY"';

/**
 * The Python snippet: servegate's Python client (clients/python) for this deployment, then `calls`. The gateway URL is
 * status.url without its `/v1/<project>/<deployment>` (so a path prefix of publicUrl stays).
 */
function pythonSnippet(route: Route, status: DeploymentStatus, calls: string[]): string {
  const gatewayUrl = (status.url ?? '').replace(/\/v1\/[^/]+\/[^/]+$/, '');
  const args = [
    `gateway_url=${JSON.stringify(gatewayUrl)}`,
    `project=${JSON.stringify(route.project)}`,
    `deployment=${JSON.stringify(route.deployment)}`,
  ];
  if (route.kind === 'python') args.push('type="python"');
  else args.push(`model_server=${JSON.stringify(route.modelServer ?? 'python')}`);
  if (route.kind === 'predictive' && route.modelName) args.push(`model_name=${JSON.stringify(route.modelName)}`);
  if (route.kind === 'predictive' && route.protocol === 'v2') args.push('protocol="v2"');
  args.push('api_key=os.environ["SERVEGATE_KEY"]');
  return [
    "# pip install ./clients/python   (servegate's Python client, from a servegate checkout)",
    'import os',
    'from servegate import Deployment',
    '',
    'd = Deployment(',
    ...args.map((a) => `    ${a},`),
    ')',
    ...calls,
  ].join('\n');
}

/** Ready-to-run calls for one deployment; the key is a placeholder ($SERVEGATE_KEY), never a real one. */
export function snippets(route: Route, status: DeploymentStatus): Snippets | undefined {
  if (route.kind === 'llm' && status.openaiUrl) {
    const model = route.modelName ?? route.deployment;
    const body = JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello!' }], stream: true });
    return {
      curl: `curl -sN ${sq(`${status.openaiUrl}/chat/completions`)} \\\n  ${KEY_HEADER} \\\n  -H 'content-type: application/json' \\\n  -d ${sq(body)}`,
      python: pythonSnippet(route, status, [
        `r = d.chat_completions(model=${JSON.stringify(model)}, messages=[{"role": "user", "content": "Hello!"}])`,
        'print(r["choices"][0]["message"]["content"])',
      ]),
      openai: [
        'import os',
        'from openai import OpenAI',
        `client = OpenAI(base_url=${JSON.stringify(status.openaiUrl)}, api_key=os.environ["SERVEGATE_KEY"])`,
        `stream = client.chat.completions.create(model=${JSON.stringify(model)}, messages=[{"role": "user", "content": "Hello!"}], stream=True)`,
        'for chunk in stream:',
        '    print(chunk.choices[0].delta.content or "", end="", flush=True)',
      ].join('\n'),
    };
  }
  if (route.kind === 'predictive' && status.inferenceUrl) {
    const body = '{"instances": [[1.0, 2.0, 3.0, 4.0]]}';
    return {
      curl: `curl -s ${sq(status.inferenceUrl)} \\\n  ${KEY_HEADER} \\\n  -H 'content-type: application/json' \\\n  -d ${sq(body)}`,
      python: pythonSnippet(
        route,
        status,
        route.protocol === 'v2'
          ? ['print(d.infer([{"name": "input-0", "shape": [1, 4], "datatype": "FP32", "data": [1.0, 2.0, 3.0, 4.0]}]))']
          : ['print(d.predict(instances=[[1.0, 2.0, 3.0, 4.0]]))'],
      ),
    };
  }
  const base = status.endpointUrl ?? status.url;
  if (!base) return undefined;
  return {
    curl: `curl -s ${sq(`${base}/`)} \\\n  ${KEY_HEADER}`,
    python: pythonSnippet(route, status, [
      'r = d.request("GET", "/", raise_on_error=False)',
      'print(r.status, r.text)',
    ]),
  };
}

/** One endpoint of a deployment as /deployments and the page show it. */
export interface EndpointView {
  address: string;
  /** Requests this gateway has in flight there. */
  inflight: number;
  /** What the endpoint last reported (llm policy), while fresh. */
  waiting?: number;
  running?: number;
  kvCacheUsage?: number;
  scrapeErrors?: number;
  /** Requests this gateway sent there since the endpoint list last changed, and their share of the deployment's. */
  picks?: number;
  share?: number;
  /** llm policy: its weight in the rendezvous (1 unless its load stays off the mean; docs/llm.md). */
  weight?: number;
}

export interface PageInput {
  statuses: readonly DeploymentStatus[];
  routes: ReadonlyMap<string, Route>;
  synced: boolean;
  stalenessMs: number;
  problems: readonly string[];
  /** Key Secrets that are not used, each with why (a bad field, the wrong namespace, ...). */
  keyProblems?: readonly KeyProblem[];
  /** A deployment's endpoints with their load (SPEC §12); undefined when it has no endpoint list. */
  endpointsOf?: (route: Route) => EndpointView[] | undefined;
  /** A saturated deployment's fair queue (SPEC §14); undefined when it never queued. */
  queueOf?: (route: Route) => QueueView | undefined;
}

export interface QueueView {
  queued: number;
  bytes: number;
  byPriority: Record<string, number>;
  saturated: boolean;
}

/** A deployment's queue as a line of text: how many wait, by priority, and whether it is saturated now. */
export function queueLine(q: QueueView): string {
  const parts = Object.entries(q.byPriority)
    .filter(([, n]) => n > 0)
    .map(([p, n]) => `${n} ${p}`);
  return `${q.queued} waiting${parts.length ? ` (${parts.join(', ')})` : ''}; ${q.saturated ? 'saturated' : 'has room'}`;
}

/** One endpoint as a line of text: address, in flight here, and what it last reported. */
export function endpointLine(e: EndpointView): string {
  let t = `${e.address}: ${e.inflight} in flight`;
  if (e.waiting !== undefined) t += `, ${e.waiting} waiting`;
  if (e.running !== undefined) t += `, ${e.running} running`;
  if (e.kvCacheUsage !== undefined) t += `, KV ${Math.round(e.kvCacheUsage * 100)}%`;
  if (e.scrapeErrors) t += `, ${e.scrapeErrors} scrape errors`;
  if (e.picks !== undefined) t += `; ${e.picks} picked (${Math.round((e.share ?? 0) * 100)}%)`;
  if (e.weight !== undefined && e.weight !== 1) t += `, weight ${Math.round(e.weight * 100) / 100}`;
  return t;
}

export function deploymentsPage(input: PageInput): string {
  let n = 0;
  const block = (title: string, text: string) => {
    const id = `s${++n}`;
    return `<div class="snip"><div class="bar">${esc(title)}<button type="button" data-copy="${id}">Copy</button></div><pre id="${id}">${esc(text)}</pre></div>`;
  };
  const rows = input.statuses
    .map((s) => {
      const r = input.routes.get(s.id);
      const project = r?.project ?? '';
      const server = r ? (r.modelServer ?? r.kind) : '';
      const statusText = s.ready ? 'Ready' : `${s.reason}: ${s.message}`;
      const urls = [
        ['URL', s.url],
        ['Inference', s.inferenceUrl],
        ['OpenAI base', s.openaiUrl],
        ['Endpoint', s.endpointUrl],
        ['Legacy host', s.hostname],
      ]
        .filter(([, v]) => v)
        .map(([k, v]) => `<div><span class="k">${esc(k)}</span> <code>${esc(v)}</code></div>`)
        .join('');
      const eps = r ? input.endpointsOf?.(r) : undefined;
      const endpoints =
        r && eps && eps.length > 1
          ? `<div class="eps"><span class="k">Endpoints (${esc(r.balancing.policy)})</span><ul data-eps="${esc(`${r.project}/${r.deployment}`)}">` +
            eps.map((e) => `<li><code>${esc(endpointLine(e))}</code></li>`).join('') +
            '</ul></div>'
          : '';
      const q = r ? input.queueOf?.(r) : undefined;
      const queue = q ? `<div class="eps"><span class="k">Queue</span> <code>${esc(queueLine(q))}</code></div>` : '';
      const sn = r && s.ready ? snippets(r, s) : undefined;
      const details = sn
        ? `<details><summary>Call it</summary>${block('curl', sn.curl)}${block('Python', sn.python)}${sn.openai ? block('OpenAI SDK (Python)', sn.openai) : ''}</details>`
        : '';
      const search = [project, s.name, s.namespace, s.resourceKind, server, statusText].join(' ').toLowerCase();
      const live = r ? `${project}/${r.deployment}` : '';
      return (
        `<tr data-search="${esc(search)}"><td>${esc(project)}</td><td>${esc(s.name)}<div class="k">${esc(s.namespace)}</div></td>` +
        `<td>${esc(s.resourceKind)}</td><td>${esc(server)}</td>` +
        `<td class="${s.ready ? 'ok' : 'bad'}">${s.ready ? 'Ready' : `<b>${esc(s.reason)}</b> ${esc(s.message)}`}</td>` +
        `<td>${urls}${endpoints}${queue}${details}</td>` +
        `<td class="num" data-live="${esc(live)}" data-f="rps">–</td><td class="num" data-live="${esc(live)}" data-f="err">–</td>` +
        `<td class="num" data-live="${esc(live)}" data-f="p99">–</td></tr>`
      );
    })
    .join('\n');
  const served = input.statuses.filter((s) => s.ready).length;
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>servegate deployments</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#1b1f24}h1{margin:0 0 .3em}
input[type=search]{padding:6px 8px;width:22em;margin:.6em 0;font-size:1em}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#f4f5f7;position:sticky;top:0}.k{color:#667;font-size:85%}code{font-size:90%}
.ok{color:#116329}.bad{color:#a40e26}.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
details summary{cursor:pointer;color:#0550ae;margin-top:4px}.snip{margin:6px 0}.bar{font-size:85%;color:#667;display:flex;gap:8px;align-items:center}
pre{background:#f6f8fa;padding:8px;margin:2px 0;overflow-x:auto;font-size:85%}button{font-size:85%}
.eps ul{margin:2px 0 4px;padding-left:1.2em}
</style></head>
<body><h1>servegate</h1>
<p>${served} of ${input.statuses.length} deployments served; route source ${input.synced ? 'synced' : '<b>not synced</b>'}${input.stalenessMs ? `, <b>stale for ${Math.round(input.stalenessMs / 1000)} s</b>` : ''}. Live figures cover the last minute. Snippets read the key from <code>$SERVEGATE_KEY</code>.</p>
${input.problems.length ? `<ul class="bad">${input.problems.map((p) => `<li>${esc(p)}</li>`).join('')}</ul>` : ''}
${input.keyProblems?.length ? `<p class="bad" id="key-problems"><b>${input.keyProblems.length} key Secret${input.keyProblems.length === 1 ? '' : 's'} not used:</b></p><ul class="bad">${input.keyProblems.map((k) => `<li><code>${esc(k.id)}</code>: ${esc(k.message)}</li>`).join('')}</ul>` : ''}
<input type="search" id="filter" placeholder="Filter: project, name, server, status…" aria-label="Filter deployments">
<table><thead><tr><th>Project</th><th>Deployment</th><th>Kind</th><th>Server</th><th>Status</th><th>URLs</th><th>Req/s</th><th>5xx</th><th>p99</th></tr></thead><tbody id="rows">
${rows}
</tbody></table>
<script>
(function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll('#rows tr'));
  document.getElementById('filter').addEventListener('input', function (e) {
    var words = e.target.value.toLowerCase().split(/\\s+/).filter(Boolean);
    rows.forEach(function (r) {
      var t = r.getAttribute('data-search');
      r.hidden = !words.every(function (w) { return t.indexOf(w) >= 0; });
    });
  });
  document.addEventListener('click', function (e) {
    var id = e.target.getAttribute && e.target.getAttribute('data-copy');
    if (!id) return;
    var text = document.getElementById(id).textContent;
    var done = function () { e.target.textContent = 'Copied'; setTimeout(function () { e.target.textContent = 'Copy'; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(done);
    else { var ta = document.createElement('textarea'); ta.value = text; document.body.appendChild(ta); ta.select(); document.execCommand('copy'); ta.remove(); done(); }
  });
  function fmt(f, v) {
    if (v === null || v === undefined) return '–';
    if (f === 'rps') return v.toFixed(v < 10 ? 2 : 0);
    if (f === 'err') return (v * 100).toFixed(1) + '%';
    return v < 1 ? (v * 1000).toFixed(0) + ' ms' : v.toFixed(2) + ' s';
  }
  function poll() {
    fetch('/api/stats', { cache: 'no-store' }).then(function (r) { return r.json(); }).then(function (s) {
      document.querySelectorAll('[data-live]').forEach(function (td) {
        var d = s.deployments[td.getAttribute('data-live')] || {};
        var f = td.getAttribute('data-f');
        td.textContent = fmt(f, f === 'rps' ? d.requestsPerSecond : f === 'err' ? d.errorRatio : d.p99Seconds);
      });
      document.querySelectorAll('[data-eps]').forEach(function (ul) {
        var list = (s.endpoints || {})[ul.getAttribute('data-eps')];
        if (!list) return;
        ul.textContent = '';
        list.forEach(function (line) {
          var li = document.createElement('li');
          var code = document.createElement('code');
          code.textContent = line;
          li.appendChild(code);
          ul.appendChild(li);
        });
      });
    }).catch(function () {});
  }
  poll();
  setInterval(poll, 5000);
})();
</script>
</body></html>`;
}
