// Backends: `spec.backend` read into a Service reference (or a URL in the files source), checked against the
// Services the source sees (when it sees them).
import { isObject } from '../../kube/objects.js';
import { isDnsLabel } from '../names.js';
import type { Backend, ServiceResource, Snapshot } from '../types.js';
import { invalid, type Refusal } from './result.js';
import { quoted } from '../quote.js';
import { copyWith } from '../../same-shape.js';

export function parseBackend(
  raw: unknown,
  namespace: string,
  source: Snapshot['source'],
  services: Map<string, ServiceResource> | undefined,
): Backend | Refusal {
  if (!isObject(raw)) return invalid('spec.backend is required: {service, port} (or {url} in the files source)');
  if (raw.urls !== undefined) {
    if (source !== 'files') {
      return invalid(
        'spec.backend.urls is refused in the kubernetes source: name a Service in the same namespace with backend.service and backend.port (its ready endpoints are picked from)',
      );
    }
    if (raw.service !== undefined || raw.url !== undefined)
      return invalid('spec.backend takes one of url, urls or service/port');
    if (!Array.isArray(raw.urls) || raw.urls.length === 0 || raw.urls.length > 256)
      return invalid('spec.backend.urls must be a list of 1 to 256 http://host:port URLs');
    const urls: string[] = [];
    for (const u of raw.urls) {
      const one = parseBackend({ url: u }, namespace, source, services);
      if ('reason' in one)
        return copyWith(one, { message: one.message.replace('spec.backend.url', 'spec.backend.urls entry') });
      const url = (one as { url: string }).url;
      if (!urls.includes(url)) urls.push(url);
    }
    return urls.length === 1 ? { kind: 'url', url: urls[0] } : { kind: 'urls', urls };
  }
  if (raw.url !== undefined) {
    if (source !== 'files') {
      return invalid(
        'spec.backend.url is refused in the kubernetes source: name a Service in the same namespace with backend.service and backend.port',
      );
    }
    if (raw.service !== undefined) return invalid('spec.backend takes either url or service/port, not both');
    if (typeof raw.url !== 'string') return invalid('spec.backend.url must be a string');
    // Messages show the URL without its userinfo: they reach the status condition, /deployments, the admin page
    // and the logs.
    const shown = withoutUserinfo(raw.url);
    let u: URL;
    try {
      u = new URL(raw.url);
    } catch {
      return invalid(`spec.backend.url ${quoted(shown)} is not a URL`);
    }
    // Any userinfo is refused, an empty one too (`http://@host`, `http://:pass@host`), which the URL parser drops.
    if (u.username || u.password || hasUserinfo(raw.url)) {
      return invalid(
        `spec.backend.url ${quoted(shown)} must not carry credentials (a userinfo "user:secret@" before the host)`,
      );
    }
    if (u.protocol !== 'http:' || u.search || u.hash) {
      return invalid(
        `spec.backend.url ${quoted(shown)} must be a plain http://host:port URL (optionally with a path prefix)`,
      );
    }
    return { kind: 'url', url: `${u.origin}${u.pathname.replace(/\/+$/, '')}` };
  }
  const { service, port } = raw;
  if (typeof service !== 'string' || !isDnsLabel(service)) {
    return invalid(
      `spec.backend.service must be the name of a Service in namespace ${namespace} (a DNS-1123 label), got ${quoted(service)}`,
    );
  }
  if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) {
    return invalid(`spec.backend.port must be a port number 1-65535, got ${quoted(port)}`);
  }
  return serviceBackend(namespace, service, port, services);
}

/**
 * A Service reference checked against the Services the source sees. An ExternalName Service (Knative's serverless
 * predictors) is reached on its external name: on `port` when it declares it or declares none, else on its first
 * declared port when `anyPort` (an InferenceService, which names no port), else BackendNotFound.
 */
export function serviceBackend(
  namespace: string,
  service: string,
  port: number,
  services: Map<string, ServiceResource> | undefined,
  anyPort = false,
): Backend | Refusal {
  if (!services) return { kind: 'service', namespace, service, port };
  const svc = services.get(`${namespace}/${service}`);
  if (!svc) return { reason: 'BackendNotFound', message: `Service ${namespace}/${service} not found` };
  if (svc.type === 'ExternalName') {
    if (!svc.externalName)
      return { reason: 'BackendNotFound', message: `Service ${namespace}/${service} is ExternalName without a name` };
    const declared = svc.ports.length === 0 || svc.ports.some((sp) => sp.port === port);
    if (!declared && !anyPort) {
      return {
        reason: 'BackendNotFound',
        message: `Service ${namespace}/${service} has no port ${port} (ports: ${svc.ports.map((sp) => sp.port).join(', ')})`,
      };
    }
    return {
      kind: 'service',
      namespace,
      service,
      port: declared ? port : svc.ports[0].port,
      externalName: svc.externalName.replace(/\.$/, ''),
    };
  }
  if (anyPort && !svc.ports.some((sp) => sp.port === port) && svc.ports.length > 0) port = svc.ports[0].port;
  const p = svc.ports.find((sp) => sp.port === port);
  if (!p) {
    const offered = svc.ports.map((sp) => sp.port).join(', ') || 'none';
    return {
      reason: 'BackendNotFound',
      message: `Service ${namespace}/${service} has no port ${port} (ports: ${offered})`,
    };
  }
  return { kind: 'service', namespace, service, port, portName: p.name, targetPort: p.targetPort };
}

/** spec.backend.path: a prefix put before every forwarded path; undefined when none. */
export function parsePathPrefix(raw: unknown, field = 'spec.backend.path'): string | undefined | Refusal {
  if (raw === undefined || raw === null || raw === '' || raw === '/') return undefined;
  if (typeof raw !== 'string' || !PATH_PREFIX.test(raw) || raw.split('/').some((s) => s === '.' || s === '..')) {
    return invalid(
      `${field} ${quoted(raw)} must be a path prefix like "/openai": it starts with "/", has no "..", "?", "#", "%" or "//"`,
    );
  }
  return raw.replace(/\/+$/, '');
}

/**
 * Whether the authority of `raw` (as the WHATWG URL parser reads it: leading and trailing spaces and controls trimmed,
 * tabs and newlines removed, "\\" a "/" for http) has an "@", i.e. a userinfo, even an empty one.
 */
function hasUserinfo(raw: string): boolean {
  let text = raw.replace(/[\t\n\r]/g, '');
  let i = 0;
  while (i < text.length && text.charCodeAt(i) <= 0x20) i++; // leading C0 controls and spaces
  text = text.slice(i);
  const authority = /^[A-Za-z][A-Za-z0-9+.-]*:[/\\]*([^/\\?#]*)/.exec(text)?.[1] ?? '';
  return authority.includes('@');
}

/**
 * `raw` safe to echo: everything up to its last "@" (the userinfo, when there is one) replaced by "***", the scheme
 * and slashes kept when they come first. A string without "@" is returned as it is.
 */
function withoutUserinfo(raw: string): string {
  const at = raw.lastIndexOf('@');
  if (at < 0) return raw;
  const head = /^\s*[A-Za-z][A-Za-z0-9+.-]*:[/\\]+/.exec(raw.slice(0, at))?.[0].trim() ?? '';
  return `${head}***${raw.slice(at)}`;
}

const PATH_PREFIX = /^(\/[A-Za-z0-9._~!$&'()*+,;=:@-]+)+\/?$/;
