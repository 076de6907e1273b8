// Validates container/k8s/*.yaml against the Kubernetes API schemas
// (kubernetes-models, from npm) and checks that every grpc probe names a
// health service share-manager publishes (read from sharemgr/health_names.h).
// Prints "N passed, M failed" and exits non-zero on any failure.
"use strict";
const fs = require("fs");
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

const dir = path.join(root, "container/k8s");
const pods = [];
const services = [];
const policies = [];
for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".yaml"))) {
  for (const doc of YAML.parseAllDocuments(fs.readFileSync(path.join(dir, file), "utf8"))) {
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
// Each NetworkPolicy selects a share-manager pod and names only ports it
// declares; the API port is reachable only from selected pods (never from an
// address block or from everyone), the health and NFS ports are reachable.
check("container/k8s holds a NetworkPolicy", () => {
  if (!policies.length) throw new Error("no NetworkPolicy in container/k8s");
});
for (const np of policies) {
  check(`NetworkPolicy ${np.metadata.name}: the API port only from the controller's pods`, () => {
    const labels = Object.entries((np.spec.podSelector && np.spec.podSelector.matchLabels) || {});
    const pod = pods.find((p) => labels.length && labels.every(([k, v]) => (p.metadata.labels || {})[k] === v));
    if (!pod) throw new Error("selects no pod in container/k8s");
    const declared = pod.spec.containers.flatMap((c) => c.ports || []).map((p) => p.name);
    const allowed = new Set();
    for (const rule of np.spec.ingress || []) {
      for (const port of rule.ports || []) {
        if (!declared.includes(port.port)) throw new Error(`port ${port.port} is not a port of the pod`);
        allowed.add(port.port);
        if (port.port !== "grpc") continue;
        const from = rule.from || [];
        if (!from.length || from.some((peer) => !peer.podSelector || peer.ipBlock)) {
          throw new Error("the grpc port is open to more than selected pods");
        }
      }
    }
    for (const name of ["grpc", "health", "nfs"]) {
      if (!allowed.has(name)) throw new Error(`port ${name} is not allowed at all`);
    }
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
