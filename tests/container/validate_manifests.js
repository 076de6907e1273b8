// Validates container/k8s/*.yaml against the Kubernetes API schemas
// (kubernetes-models, from npm) and checks that every grpc probe names a
// health service share-manager publishes (read from sharemgr/health_names.h).
// Prints "N passed, M failed" and exits non-zero on any failure.
// Usage: node validate_manifests.js [--node-cidr CIDR]
// The manifests ship REPLACE_WITH_NODE_CIDR where the nodes' network goes:
// as shipped they fail here; --node-cidr (tests only) fills a CIDR in first.
"use strict";
const fs = require("fs");
const net = require("net");
const path = require("path");
const YAML = require("yaml");
const v1 = require("kubernetes-models/v1");

const root = path.resolve(__dirname, "../..");
const header = fs.readFileSync(path.join(root, "sharemgr/health_names.h"), "utf8");
const published = new Set([""]);
for (const m of header.matchAll(/inline constexpr char \w+\[\] = "([^"]*)";/g)) published.add(m[1]);

const networking = require("kubernetes-models/networking.k8s.io/v1");

const models = {
  "v1/Pod": v1.Pod,
  "v1/Service": v1.Service,
  "networking.k8s.io/v1/NetworkPolicy": networking.NetworkPolicy,
};
let passed = 0;
let failed = 0;
function check(name, fn) {
  try {
    fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e.message}`);
  }
}

// An IPv4 or IPv6 network as an ipBlock and --nfs-clients take it, never all
// addresses (a /0 is no node network).
function isCidr(text) {
  const [address, prefix, extra] = String(text).split("/");
  const family = net.isIP(address);
  if (!family || extra !== undefined || !/^[0-9]{1,3}$/.test(prefix || "")) return false;
  return Number(prefix) > 0 && Number(prefix) <= (family === 4 ? 32 : 128);
}

const PLACEHOLDER = "REPLACE_WITH_NODE_CIDR";
const cidrFlag = process.argv.indexOf("--node-cidr");
const nodeCidr = cidrFlag >= 0 ? process.argv[cidrFlag + 1] : undefined;
if (cidrFlag >= 0 && !isCidr(nodeCidr)) {
  console.log(`--node-cidr needs a CIDR network (e.g. 10.0.0.0/16), not "${nodeCidr}"`);
  process.exit(2);
}

// --dir: another copy of the manifests (the k8s tests check altered ones).
const dirFlag = process.argv.indexOf("--dir");
const dir = dirFlag >= 0 ? process.argv[dirFlag + 1] : path.join(root, "container/k8s");
const pods = [];
const services = [];
const policies = [];
for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".yaml"))) {
  let text = fs.readFileSync(path.join(dir, file), "utf8");
  if (nodeCidr) text = text.replaceAll(PLACEHOLDER, nodeCidr);
  check(`${file}: the nodes' network is filled in`, () => {
    if (text.includes(PLACEHOLDER)) {
      throw new Error(
        `${PLACEHOLDER} is still here: replace it with the nodes' network (a CIDR), in the ` +
          `NetworkPolicy's NFS and health rules and the pod's --nfs-clients alike (as shipped the ` +
          `manifests are a template; the test fills one in with --node-cidr)`,
      );
    }
  });
  for (const doc of YAML.parseAllDocuments(text)) {
    const obj = doc.toJS();
    if (obj.kind === "Pod") pods.push(obj);
    if (obj.kind === "Service") services.push(obj);
    if (obj.kind === "NetworkPolicy") policies.push(obj);
    const key = `${obj.apiVersion}/${obj.kind}`;
    check(`${file}: ${key} ${obj.metadata && obj.metadata.name} is a valid object`, () => {
      const Model = models[key];
      if (!Model) throw new Error(`no schema for ${key}`);
      new Model(obj).validate();
    });
    for (const c of (obj.spec && obj.spec.containers) || []) {
      // Rules the API server enforces beyond the schema, and ours: never privileged.
      check(`${file}: ${c.name} securityContext is accepted and not privileged`, () => {
        const sc = c.securityContext || {};
        if (sc.privileged) throw new Error("privileged: true");
        const added = ((sc.capabilities && sc.capabilities.add) || []).map((cap) => cap.replace(/^CAP_/, ""));
        if (sc.allowPrivilegeEscalation === false && added.includes("SYS_ADMIN")) {
          throw new Error("allowPrivilegeEscalation: false together with SYS_ADMIN");
        }
      });
      // A repair or a start-up fsck keeps readiness NOT_SERVING for as long as
      // it takes: a probe that restarts the container must not watch it.
      for (const probe of ["startupProbe", "livenessProbe"]) {
        check(`${file}: ${c.name} ${probe} watches liveness, never readiness`, () => {
          const service = (c[probe] && c[probe].grpc && c[probe].grpc.service) || "";
          if (service !== "liveness") throw new Error(`watches "${service}"`);
        });
      }
      for (const probe of ["startupProbe", "livenessProbe", "readinessProbe"]) {
        check(`${file}: ${c.name} ${probe} uses a published health service on the health port`, () => {
          const p = c[probe];
          if (!p || !p.grpc) throw new Error("no grpc probe");
          const service = p.grpc.service || "";
          if (!published.has(service)) {
            throw new Error(`"${service}" is not one of ${[...published].map((s) => `"${s}"`).join(", ")}`);
          }
          // kubelet's gRPC probes cannot do TLS: they must use the plaintext
          // health listener (--health-listen, default :9601), never the API port.
          const healthPort = (c.ports || []).find((port) => port.name === "health");
          if (!healthPort || healthPort.containerPort !== p.grpc.port) {
            throw new Error(`probes port ${p.grpc.port}, not the container's "health" port`);
          }
          const flag = (c.args || []).find((a) => a.startsWith("--health-listen="));
          const listened = flag ? Number(flag.split(":").pop()) : 9601;
          if (listened !== p.grpc.port) {
            throw new Error(`probes port ${p.grpc.port}, but share-manager serves health on ${listened}`);
          }
        });
      }
      if (c.name === "share-manager") {
        // --metrics-listen, the container's "metrics" port and the scrape
        // annotations name one port: Prometheus scrapes what is served.
        check(`${file}: ${c.name} serves metrics on its "metrics" port, the one the scrape annotations name`, () => {
          const flag = (c.args || []).find((a) => a.startsWith("--metrics-listen="));
          if (!flag) throw new Error("no --metrics-listen=: no metrics are served");
          const listened = Number(flag.split(":").pop());
          const port = (c.ports || []).find((p) => p.name === "metrics");
          if (!port || port.containerPort !== listened) {
            throw new Error(`--metrics-listen port ${listened} is not the container's "metrics" port`);
          }
          const a = (obj.metadata && obj.metadata.annotations) || {};
          if (a["prometheus.io/scrape"] !== "true") throw new Error('no prometheus.io/scrape: "true"');
          if (a["prometheus.io/port"] !== String(listened)) {
            throw new Error(`prometheus.io/port ${a["prometheus.io/port"]}, metrics are on ${listened}`);
          }
          if (a["prometheus.io/path"] !== "/metrics") throw new Error("prometheus.io/path is not /metrics");
        });
        check(`${file}: ${c.name} serves its API over mutual TLS from a mounted Secret`, () => {
          const args = c.args || [];
          const dir = args.find((a) => a.startsWith("--tls-dir="));
          if (!dir) throw new Error("no --tls-dir=");
          if (!args.some((a) => a.startsWith("--tls-allowed-client="))) {
            throw new Error("no --tls-allowed-client=: any client the CA signed could call");
          }
          const path = dir.slice("--tls-dir=".length);
          const mount = (c.volumeMounts || []).find((m) => m.mountPath === path);
          if (!mount) throw new Error(`nothing mounted at ${path}`);
          if (mount.subPath) throw new Error("a subPath mount is never updated: rotation would not reach it");
          const volume = ((obj.spec && obj.spec.volumes) || []).find((v) => v.name === mount.name);
          if (!volume || !volume.secret) throw new Error(`${path} is not a Secret volume`);
        });
      }
    }
  }
}
// Every check above loops over what was found: none found would pass them all.
check("container/k8s holds a Pod with a share-manager container and a Service", () => {
  if (!pods.length) throw new Error("no Pod in container/k8s");
  if (!services.length) throw new Error("no Service in container/k8s");
  for (const pod of pods) {
    const containers = (pod.spec && pod.spec.containers) || [];
    if (!containers.some((c) => c.name === "share-manager")) {
      throw new Error(`Pod ${pod.metadata.name} has no share-manager container`);
    }
  }
});
// Each NetworkPolicy selects a share-manager pod; every ingress rule names
// ports the pod declares (a rule without ports, or a port entry without a
// port, opens every port, the API's included); the API port is reachable only
// from the controller's pods, metrics only from Prometheus' pods, NFS and
// health only from address blocks (the nodes': the kubelet mounts and probes
// from the node), and the pod's --nfs-clients are the NFS rule's blocks.
// The controller's pods as the manifests ship them (namespace and labels are
// template values: change them here too).
const CONTROLLER_PEER = {
  namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "longhorn-system" } },
  podSelector: { matchLabels: { "app.kubernetes.io/name": "share-controller" } },
};
// Prometheus' pods, as the manifests ship them (template values likewise).
const PROMETHEUS_PEER = {
  namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "monitoring" } },
  podSelector: { matchLabels: { "app.kubernetes.io/name": "prometheus" } },
};
// Throws unless `from` is this one peer and nothing else.
function onlyFrom(port, from, peer) {
  if (!from.length || from.some((p) => !sameObject(p, peer))) {
    throw new Error(`the ${port} port is open to more than ${JSON.stringify(peer)}`);
  }
}
function sameObject(a, b) {
  const sorted = (v) =>
    v && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])]))
      : v;
  return JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));
}
function selectedPod(np) {
  const labels = Object.entries((np.spec.podSelector && np.spec.podSelector.matchLabels) || {});
  const selects = (p) => labels.length && labels.every(([k, v]) => (p.metadata.labels || {})[k] === v);
  const pod = pods.find(selects);
  if (!pod) throw new Error("selects no pod in container/k8s");
  return pod;
}
// The address blocks a rule's `from` admits to `port`, if they are CIDR
// networks and nothing else (not every address, no pods, no namespaces).
function nodeBlocks(port, from) {
  if (!from.length || from.some((peer) => Object.keys(peer).join() !== "ipBlock")) {
    throw new Error(`the ${port} port is open to more than the nodes' address blocks (ipBlock only)`);
  }
  for (const { ipBlock } of from) {
    if (!isCidr(ipBlock.cidr)) {
      throw new Error(`the ${port} port's ipBlock ${ipBlock.cidr} is not a node network (CIDR)`);
    }
  }
  return from.map(({ ipBlock }) => ipBlock.cidr);
}
// Throws on the first rule that lets more in than the above; returns the NFS
// rule's address blocks.
function checkPolicy(np) {
  const pod = selectedPod(np);
  const declared = pod.spec.containers.flatMap((c) => c.ports || []).map((p) => p.name);
  const allowed = new Set();
  const nfsBlocks = [];
  for (const [i, rule] of (np.spec.ingress || []).entries()) {
    const ports = rule.ports || [];
    if (!ports.length) {
      throw new Error(`ingress rule ${i} has no ports: it opens every port, grpc included`);
    }
    const from = rule.from || [];
    for (const port of ports) {
      if (port.port === undefined) {
        throw new Error(`ingress rule ${i} has a port entry without port: it opens every port`);
      }
      if (!declared.includes(port.port)) {
        throw new Error(`port ${port.port} is not a named port of the pod`);
      }
      allowed.add(port.port);
      if (port.port === "grpc") onlyFrom("grpc", from, CONTROLLER_PEER);
      if (port.port === "metrics") onlyFrom("metrics", from, PROMETHEUS_PEER);
      if (port.port === "nfs") nfsBlocks.push(...nodeBlocks("nfs", from));
      // kubelet probes from the node: a pod that could reach the plaintext
      // health port could flood it and crowd the probes out.
      if (port.port === "health") nodeBlocks("health", from);
    }
  }
  for (const name of ["grpc", "health", "nfs", "metrics"]) {
    if (!allowed.has(name)) throw new Error(`port ${name} is not allowed at all`);
  }
  return nfsBlocks;
}
check("container/k8s holds a NetworkPolicy", () => {
  if (!policies.length) throw new Error("no NetworkPolicy in container/k8s");
});
for (const np of policies) {
  const name = `NetworkPolicy ${np.metadata.name}`;
  check(`${name}: every rule names its ports; grpc only from the controller's pods, metrics only from Prometheus', nfs and health only from the nodes`, () => {
    checkPolicy(np);
  });
  check(`${name}: the pod's --nfs-clients are the NFS rule's address blocks`, () => {
    const blocks = [...new Set(checkPolicy(np))].sort();
    const c = selectedPod(np).spec.containers.find((x) => x.name === "share-manager") || {};
    const flag = "--nfs-clients=";
    const clients = (c.args || []).filter((a) => a.startsWith(flag)).map((a) => a.slice(flag.length));
    const sorted = [...new Set(clients)].sort();
    if (JSON.stringify(sorted) !== JSON.stringify(blocks)) {
      throw new Error(`--nfs-clients ${JSON.stringify(sorted)}, the NFS rule admits ${JSON.stringify(blocks)}`);
    }
  });
}
// The policy check itself must refuse what it is there to refuse, or it
// proves nothing: each case widens a valid policy in one way.
const validPolicy = {
  spec: {
    podSelector: { matchLabels: (pods[0] && pods[0].metadata.labels) || {} },
    ingress: [
      { from: [CONTROLLER_PEER], ports: [{ port: "grpc", protocol: "TCP" }] },
      { from: [{ ipBlock: { cidr: "10.0.0.0/16" } }], ports: [{ port: "health", protocol: "TCP" }] },
      { from: [{ ipBlock: { cidr: "10.0.0.0/16" } }], ports: [{ port: "nfs", protocol: "TCP" }] },
      { from: [PROMETHEUS_PEER], ports: [{ port: "metrics", protocol: "TCP" }] },
    ],
  },
};
const widened = {
  "NFS from every pod (namespaceSelector {})": (p) =>
    p.spec.ingress[2].from.push({ namespaceSelector: {} }),
  "NFS from the controller's pods": (p) => p.spec.ingress[2].from.push(CONTROLLER_PEER),
  "NFS still at the placeholder": (p) => (p.spec.ingress[2].from[0].ipBlock.cidr = PLACEHOLDER),
  "NFS from every address (0.0.0.0/0)": (p) => (p.spec.ingress[2].from[0].ipBlock.cidr = "0.0.0.0/0"),
  "NFS from everyone (no from)": (p) => delete p.spec.ingress[2].from,
  "health from everyone (no from)": (p) => delete p.spec.ingress[1].from,
  "health from every pod (namespaceSelector {})": (p) =>
    p.spec.ingress[1].from.push({ namespaceSelector: {} }),
  "health from the controller's pods besides the nodes": (p) => p.spec.ingress[1].from.push(CONTROLLER_PEER),
  "health still at the placeholder": (p) => (p.spec.ingress[1].from[0].ipBlock.cidr = PLACEHOLDER),
  "health from every address (0.0.0.0/0)": (p) => (p.spec.ingress[1].from[0].ipBlock.cidr = "0.0.0.0/0"),
  "health beside grpc in the controller's rule (open to its pods)": (p) =>
    p.spec.ingress[0].ports.push({ port: "health", protocol: "TCP" }),
  "a rule without ports": (p) => p.spec.ingress.push({ from: [CONTROLLER_PEER] }),
  "a rule with an empty ports list": (p) =>
    p.spec.ingress.push({ from: [{ ipBlock: { cidr: "10.0.0.0/16" } }], ports: [] }),
  "a port entry without port": (p) => p.spec.ingress[1].ports.push({ protocol: "TCP" }),
  "the API port by number beside health": (p) =>
    p.spec.ingress[1].ports.push({ port: 9600, protocol: "TCP" }),
  "grpc from an address block": (p) =>
    p.spec.ingress[0].from.push({ ipBlock: { cidr: "10.0.0.0/16" } }),
  "grpc from the controller's labels in any namespace": (p) =>
    p.spec.ingress[0].from.push({ namespaceSelector: {}, podSelector: CONTROLLER_PEER.podSelector }),
  "grpc from every pod of the controller's namespace": (p) =>
    p.spec.ingress[0].from.push({ namespaceSelector: CONTROLLER_PEER.namespaceSelector }),
  "grpc beside health (open to the nodes)": (p) =>
    p.spec.ingress[1].ports.push({ port: "grpc", protocol: "TCP" }),
  "grpc from everyone (no from)": (p) => delete p.spec.ingress[0].from,
  "metrics from everyone (no from)": (p) => delete p.spec.ingress[3].from,
  "metrics from every pod of the monitoring namespace": (p) =>
    p.spec.ingress[3].from.push({ namespaceSelector: PROMETHEUS_PEER.namespaceSelector }),
  "metrics from the nodes' address block": (p) =>
    p.spec.ingress[3].from.push({ ipBlock: { cidr: "10.0.0.0/16" } }),
  "metrics beside health (open to the nodes)": (p) =>
    p.spec.ingress[1].ports.push({ port: "metrics", protocol: "TCP" }),
  "metrics not allowed at all": (p) => p.spec.ingress.pop(),
};
check("the NetworkPolicy check accepts the valid policy it widens below", () => {
  checkPolicy(structuredClone(validPolicy));
});
for (const [what, widen] of Object.entries(widened)) {
  check(`the NetworkPolicy check refuses ${what}`, () => {
    const p = structuredClone(validPolicy);
    widen(p);
    let refused = false;
    try {
      checkPolicy(p);
    } catch (e) {
      refused = true;
    }
    if (!refused) throw new Error("accepted");
  });
}
// README "Kubernetes manifests": the probe timings, the grace period and the
// restart policy it documents are the ones shipped.
const documented = {
  startupProbe: { service: "liveness", periodSeconds: 2, failureThreshold: 30 },
  livenessProbe: { service: "liveness", periodSeconds: 10, failureThreshold: 3 },
  readinessProbe: { service: "readiness", periodSeconds: 2, failureThreshold: 1 },
};
for (const pod of pods) {
  const c = ((pod.spec && pod.spec.containers) || []).find((x) => x.name === "share-manager") || {};
  for (const [probe, want] of Object.entries(documented)) {
    check(`Pod ${pod.metadata.name}: ${probe} on ${want.service} every ${want.periodSeconds} s, ${want.failureThreshold} failures (README)`, () => {
      const p = c[probe] || {};
      const got = { service: p.grpc && p.grpc.service, periodSeconds: p.periodSeconds, failureThreshold: p.failureThreshold };
      if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`is ${JSON.stringify(got)}`);
    });
  }
  // Nothing of the API the pod does not use (no token unless a serving lease
  // on Kubernetes needs one), and the runtime's default syscall filter:
  // proven on a real node to let ganesha (open_by_handle_at) and
  // share-manager (mount, pidfd_open) work (tests/k8s, "ready").
  check(`Pod ${pod.metadata.name}: no service-account token, seccomp RuntimeDefault`, () => {
    if (pod.spec.automountServiceAccountToken !== false) throw new Error("automountServiceAccountToken is not false");
    const profile = (pod.spec.securityContext && pod.spec.securityContext.seccompProfile) || {};
    const own = (c.securityContext && c.securityContext.seccompProfile) || {};
    if (profile.type !== "RuntimeDefault") throw new Error(`pod seccompProfile ${JSON.stringify(profile)}`);
    if (own.type && own.type !== "RuntimeDefault") throw new Error(`container seccompProfile ${JSON.stringify(own)}`);
  });
  check(`Pod ${pod.metadata.name}: restartPolicy Never, terminationGracePeriodSeconds 45 (README)`, () => {
    if (pod.spec.restartPolicy !== "Never") throw new Error(`restartPolicy ${pod.spec.restartPolicy}`);
    if (pod.spec.terminationGracePeriodSeconds !== 45) {
      throw new Error(`terminationGracePeriodSeconds ${pod.spec.terminationGracePeriodSeconds}`);
    }
  });
}
// Each Service selects a share-manager pod and targets a port it declares.
for (const svc of services) {
  check(`Service ${svc.metadata.name} selects a pod and targets its NFS port`, () => {
    const selector = Object.entries(svc.spec.selector || {});
    const pod = pods.find((p) => selector.every(([k, v]) => (p.metadata.labels || {})[k] === v));
    if (!selector.length || !pod) throw new Error("selects no pod in container/k8s");
    const declared = pod.spec.containers.flatMap((c) => c.ports || []);
    if (!(svc.spec.ports || []).length) throw new Error("no ports");
    for (const port of svc.spec.ports) {
      const target = declared.find((d) => d.name === port.targetPort || d.containerPort === port.targetPort);
      if (!target) throw new Error(`targetPort ${port.targetPort} is not a port of pod ${pod.metadata.name}`);
      if (target.name !== "nfs") throw new Error(`targetPort ${port.targetPort} is not the pod's "nfs" port`);
    }
  });
}
// The validator itself must reject a broken object, or it proves nothing.
check("an invalid Pod is rejected", () => {
  let rejected = false;
  try {
    new v1.Pod({ metadata: { name: "x" }, spec: { containers: [{ name: 1 }] } }).validate();
  } catch (e) {
    rejected = true;
  }
  if (!rejected) throw new Error("validator accepted a container whose name is a number");
});
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
