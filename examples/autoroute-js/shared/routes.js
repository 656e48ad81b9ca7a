// The objects that route to a Deployment — a Service, a VirtualService `<deployment>.<route>`
// and the route's Gateway — and how to tell whether the ones in the cluster still are those.
// Syncing applies `desiredRoutes`; Ready compares them with what it observes through
// `routeDifferences`, so the two phases cannot disagree.
import { toJson } from '@wasmpilot/guest';

/** The Istio API version of the VirtualService and Gateway. */
export const ISTIO_API_VERSION = 'networking.istio.io/v1alpha3';

/** Everything Syncing applies for route `routeName` in `namespace` to the `routable`
 * Deployments: its Gateway, then per Deployment a Service and a VirtualService. */
export function desiredRoutes(routeName, namespace, routable) {
  return {
    gateway: gateway(routeName, namespace),
    services: routable.map((d) => service(d, namespace)),
    virtualServices: routable.map((d) => virtualService(d, hostname(d, routeName), routeName, namespace)),
  };
}

/** `<deployment>.<route>`: the host a Deployment is routed under. */
export function hostname(deployment, routeName) {
  return `${deployment.name}.${routeName}`;
}

/** A Service named after the Deployment, port `http`, selecting the Deployment's pods. */
export function service(deployment, namespace) {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: namespace === undefined ? { name: deployment.name } : { name: deployment.name, namespace },
    spec: {
      // The protocol is explicit: server-side apply on Kubernetes 1.20 rejects a port without
      // it ("associative list with keys has an element that omits key field protocol").
      ports: [{ name: 'http', port: deployment.port, protocol: 'TCP' }],
      selector: { ...deployment.podLabels },
    },
  };
}

/** Routes host `<deployment>.<route>` on the route's Gateway to the Deployment's Service. */
export function virtualService(deployment, host, routeName, namespace) {
  return {
    apiVersion: ISTIO_API_VERSION,
    kind: 'VirtualService',
    metadata: { name: host, namespace: namespace ?? null },
    spec: {
      hosts: [host],
      gateways: [routeName],
      http: [
        {
          match: [{ uri: { prefix: '/' } }],
          route: [{ destination: { host: deployment.name, port: { number: deployment.port } } }],
        },
      ],
    },
  };
}

/** One Gateway per route on the default Istio ingress gateway, for hosts `*.<route>`. */
export function gateway(routeName, namespace) {
  return {
    apiVersion: ISTIO_API_VERSION,
    kind: 'Gateway',
    metadata: { name: routeName, namespace: namespace ?? null },
    spec: {
      selector: { istio: 'ingressgateway' },
      servers: [{ port: { number: 80, name: 'http', protocol: 'HTTP' }, hosts: [`*.${routeName}`] }],
    },
  };
}

/** How the routes observed in the cluster (the route's own Services, VirtualServices and
 * Gateways) differ from `desired`, one line per difference (empty: in sync). Only what the
 * operator sets counts: the Service's ports and selector, the VirtualService's and Gateway's
 * spec; defaults the API server adds (a port's targetPort, the cluster IP) are not differences. */
export function routeDifferences(desired, services, virtualServices, gateways) {
  const differences = [];
  compare('Gateway', [desired.gateway], gateways, differences, specDifference);
  compare('Service', desired.services, services, differences, serviceDifference);
  compare('VirtualService', desired.virtualServices, virtualServices, differences, specDifference);
  return differences;
}

/** `value[key]`, or null when `value` is not an object or has no `key` (serde_json's `value[key]`). */
function field(value, key) {
  return value !== null && typeof value === 'object' && !Array.isArray(value) && key in value ? value[key] : null;
}

/** JSON equality (serde_json's `Value` equality; JavaScript cannot tell 8080 from 8080.0). */
function sameJson(a, b) {
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => sameJson(x, b[i]));
  }
  if (a !== null && b !== null && typeof a === 'object' && typeof b === 'object') {
    const keys = Object.keys(a);
    return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && sameJson(a[k], b[k]));
  }
  return a === b;
}

/** A VirtualService's or Gateway's whole spec (the operator sets all of it). */
function specDifference(want, got) {
  if (sameJson(field(want, 'spec'), field(got, 'spec'))) return undefined;
  return `spec is ${compact(field(got, 'spec'))} (want ${compact(field(want, 'spec'))})`;
}

/** A Service's ports (name, port, protocol, and no others) and selector. */
function serviceDifference(want, got) {
  const ports = (s) => {
    const listed = field(field(s, 'spec'), 'ports');
    return (Array.isArray(listed) ? listed : []).map((p) => [
      field(p, 'name'),
      field(p, 'port'),
      field(p, 'protocol') ?? 'TCP',
    ]);
  };
  if (!sameJson(ports(want), ports(got))) {
    return `ports are ${compact(field(field(got, 'spec'), 'ports'))} (want ${compact(field(field(want, 'spec'), 'ports'))})`;
  }
  const wantSelector = field(field(want, 'spec'), 'selector');
  const gotSelector = field(field(got, 'spec'), 'selector');
  if (!sameJson(wantSelector, gotSelector)) {
    return `selector is ${compact(gotSelector)} (want ${compact(wantSelector)})`;
  }
  return undefined;
}

/** Each desired object must be observed (by name) and not differ; observed objects that are
 * not desired are differences too (Syncing prunes them). */
function compare(kind, desired, observed, differences, differ) {
  const name = (o) => {
    const found = field(field(o, 'metadata'), 'name');
    return typeof found === 'string' ? found : '';
  };
  for (const want of desired) {
    const got = observed.find((o) => name(o) === name(want));
    if (got === undefined) {
      differences.push(`${kind} ${name(want)} is missing`);
    } else {
      const difference = differ(want, got);
      if (difference !== undefined) differences.push(`${kind} ${name(want)}: ${difference}`);
    }
  }
  for (const got of observed) {
    if (!desired.some((w) => name(w) === name(got))) differences.push(`${kind} ${name(got)} is no longer routed`);
  }
}

/** Compact JSON, cut after 200 characters (code points). */
function compact(value) {
  const chars = [...toJson(value)];
  return chars.length > 200 ? `${chars.slice(0, 200).join('')}…` : chars.join('');
}
