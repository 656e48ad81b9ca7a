// The AutoRoute and Deployment objects the workers read, checked where the workers read them.
//
// `fromJSON` throws as the Rust types' deserialization fails: a missing `metadata`, `spec` or
// `spec.deploymentSelector`, or a field the workers read that has the wrong JSON type. Fields
// the workers do not read are not checked.

const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);

function jsonType(value) {
  if (value === null || value === undefined) return 'null';
  if (Array.isArray(value)) return 'an array';
  return { boolean: 'a boolean', number: 'a number', string: 'a string' }[typeof value] ?? 'an object';
}

function object(value, what) {
  if (!isObject(value)) throw new TypeError(`${what}: expected an object, not ${jsonType(value)}`);
  return value;
}

/** `parent[key]` as an object, `{}` when absent or null (Kubernetes' optional fields). */
function optionalObject(parent, key, what) {
  return parent[key] === undefined || parent[key] === null ? {} : object(parent[key], what);
}

function optionalText(parent, key, what) {
  const value = parent[key] ?? undefined;
  if (value !== undefined && typeof value !== 'string') {
    throw new TypeError(`${what}: expected a string, not ${jsonType(value)}`);
  }
  return value;
}

function textMap(parent, key, what) {
  if (parent[key] === undefined || parent[key] === null) return undefined;
  for (const [k, v] of Object.entries(object(parent[key], what))) {
    if (typeof v !== 'string') throw new TypeError(`${what}.${k}: expected a string, not ${jsonType(v)}`);
  }
  return { ...parent[key] };
}

function textList(value, what) {
  if (!Array.isArray(value)) throw new TypeError(`${what}: expected an array, not ${jsonType(value)}`);
  for (const item of value) {
    if (typeof item !== 'string') throw new TypeError(`${what}: expected strings, not ${jsonType(item)}`);
  }
  return [...value];
}

function list(parent, key, what) {
  const value = parent[key];
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new TypeError(`${what}: expected an array, not ${jsonType(value)}`);
  return value;
}

/** A Kubernetes LabelSelector checked: `matchLabels` strings, `matchExpressions` with string
 * `key`/`operator` and string `values`. (Paths in messages are built only on error: this runs
 * once per selected Deployment.) */
function labelSelector(value, what) {
  const selector = object(value, what);
  const labels = selector.matchLabels;
  if (labels !== undefined && labels !== null && !(isObject(labels) && allText(labels))) {
    textMap(selector, 'matchLabels', `${what}.matchLabels`); // throws, naming the field
  }
  const expressions = selector.matchExpressions;
  if (expressions !== undefined && expressions !== null) {
    list(selector, 'matchExpressions', `${what}.matchExpressions`).forEach((expr, index) => {
      const where = `${what}.matchExpressions[${index}]`;
      object(expr, where);
      optionalText(expr, 'key', `${where}.key`);
      optionalText(expr, 'operator', `${where}.operator`);
      if (expr.values !== undefined && expr.values !== null) textList(expr.values, `${where}.values`);
    });
  }
  return selector;
}

/** Whether every member of `map` is a string. */
function allText(map) {
  for (const key in map) {
    if (typeof map[key] !== 'string') return false;
  }
  return true;
}

/** Routes ingress traffic through an Istio gateway to every Deployment the selector matches. */
export class AutoRoute {
  /** @param {{ name?: string, namespace?: string, deploymentSelector: object, syncedDeployments?: string[] }} fields */
  constructor({ name, namespace, deploymentSelector, syncedDeployments = [] }) {
    this.name = name;
    this.namespace = namespace;
    /** `spec.deploymentSelector`: which Deployments (in the AutoRoute's namespace) to route to.
     * The host selects by it (`selectorFrom` in operator.yaml); the workers get only those. */
    this.deploymentSelector = deploymentSelector;
    /** `status.syncedDeployments`: every Deployment the selector matched at the last sync. */
    this.syncedDeployments = syncedDeployments;
  }

  static fromJSON(value) {
    const route = object(value, 'the AutoRoute');
    if (!('metadata' in route)) throw new TypeError('missing field `metadata`');
    if (!('spec' in route)) throw new TypeError('missing field `spec`');
    const metadata = object(route.metadata, 'metadata');
    const spec = object(route.spec, 'spec');
    if (!('deploymentSelector' in spec)) throw new TypeError('missing field `deploymentSelector`');
    const status = optionalObject(route, 'status', 'status');
    const synced = status.syncedDeployments;
    return new AutoRoute({
      name: optionalText(metadata, 'name', 'metadata.name'),
      namespace: optionalText(metadata, 'namespace', 'metadata.namespace'),
      deploymentSelector: labelSelector(spec.deploymentSelector, 'spec.deploymentSelector'),
      syncedDeployments:
        synced === undefined || synced === null ? [] : textList(synced, 'status.syncedDeployments'),
    });
  }
}

const I32_MIN = -(2 ** 31);
const I32_MAX = 2 ** 31 - 1;

/** The fields of an apps/v1 Deployment the workers read. */
export class Deployment {
  constructor({ name, podLabels, containerPorts }) {
    this.name = name;
    /** `spec.selector.matchLabels`: the labels of the Deployment's pods. */
    this.podLabels = podLabels;
    /** Per container of the pod template, its `ports[].containerPort` (0 where absent). */
    this.containerPorts = containerPorts;
  }

  static fromJSON(value) {
    const deployment = object(value, 'the Deployment');
    const metadata = optionalObject(deployment, 'metadata', 'metadata');
    const spec = optionalObject(deployment, 'spec', 'spec');
    const selector = labelSelector(optionalObject(spec, 'selector', 'spec.selector'), 'spec.selector');
    const template = optionalObject(spec, 'template', 'spec.template');
    const podSpec = optionalObject(template, 'spec', 'spec.template.spec');
    const containers = list(podSpec, 'containers', 'spec.template.spec.containers');
    const containerPorts = [];
    for (let index = 0; index < containers.length; index++) {
      const container = containers[index];
      if (!isObject(container)) object(container, `spec.template.spec.containers[${index}]`); // throws
      const listed = container.ports;
      if (listed !== undefined && listed !== null && !Array.isArray(listed)) {
        list(container, 'ports', `spec.template.spec.containers[${index}].ports`); // throws
      }
      const ports = [];
      for (let portIndex = 0; listed && portIndex < listed.length; portIndex++) {
        const port = listed[portIndex];
        const number = isObject(port) ? (port.containerPort ?? 0) : undefined;
        if (!Number.isInteger(number) || number < I32_MIN || number > I32_MAX) {
          throw portError(port, index, portIndex);
        }
        ports.push(number);
      }
      containerPorts.push(ports);
    }
    return new Deployment({
      name: optionalText(metadata, 'name', 'metadata.name'),
      podLabels: textMap(selector, 'matchLabels', 'spec.selector.matchLabels') ?? {},
      containerPorts,
    });
  }
}

/** Why port `portIndex` of container `index` is not a port with a 32-bit `containerPort`, as
 * the Rust type's deserialization says it. */
function portError(port, index, portIndex) {
  const where = `spec.template.spec.containers[${index}].ports[${portIndex}]`;
  const number = object(port, where).containerPort ?? 0; // throws when not an object
  return new TypeError(`${where}.containerPort: expected a 32-bit integer, not ${JSON.stringify(number)}`);
}
