#!/usr/bin/env bash
# The local API server's CPU per request, with and without impersonation: every request of the
# host is made as its operator's own account (Impersonate-User), the native bench controller's as
# the admin. ROUNDS pairs of N GETs of one AutoRoute list, on one keep-alive connection each, the
# admin's and the operator's alternating; prints each run and the median (min–max) of each side.
set -euo pipefail
# Needs the local cluster up with the autoroute WasmOperator granted (any e2e test or bench run
# grants it), and a quiet cluster: the API server's whole CPU is counted. ~1 min:
#   ROUNDS=5 N=3000 deploy/local/impersonation-cost.sh
repo=$(cd "$(dirname "$0")/../.." && pwd)
eval "$("$repo/deploy/local/cluster.sh" env)"
exec python3 - "${ROUNDS:-5}" "${N:-3000}" "${AS_USER:-system:serviceaccount:wasmpilot-system:op-autoroute}" <<'PY'
import http.client, os, ssl, statistics, sys, time, urllib.parse

rounds, n, user = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
kubeconfig = open(os.environ["KUBECONFIG"]).read()
server = next(l.split(":", 1)[1].strip() for l in kubeconfig.splitlines() if l.strip().startswith("server:"))
token = next(l.split(":", 1)[1].strip() for l in kubeconfig.splitlines() if l.strip().startswith("token:"))
url = urllib.parse.urlsplit(server)
path = "/apis/examples.io/v1/namespaces/default/autoroutes"

def apiserver_cpu_seconds():
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "kube-apiserver":
                fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total

def run(as_user):
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=ssl._create_unverified_context())
    headers = {"Authorization": "Bearer " + token}
    if as_user:
        headers["Impersonate-User"] = as_user
    def get():
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            sys.exit(f"GET {path} as {as_user or 'admin'}: {response.status} {body[:300]!r}")
    get()
    before, started = apiserver_cpu_seconds(), time.monotonic()
    for _ in range(n):
        get()
    ms = 1e3 * (apiserver_cpu_seconds() - before) / n
    print(f"{'as ' + as_user if as_user else 'admin'}: {n} GETs, API server {ms:.3f} ms CPU and "
          f"{1e3 * (time.monotonic() - started) / n:.3f} ms wall per request")
    return ms

admin, impersonated = [], []
for _ in range(rounds):
    admin.append(run(""))
    impersonated.append(run(user))
for label, xs in (("admin", admin), ("impersonated", impersonated)):
    print(f"{label}: median {statistics.median(xs):.3f} ms CPU per request ({min(xs):.3f}–{max(xs):.3f}), {rounds} runs")
print(f"impersonation adds {statistics.median(impersonated) - statistics.median(admin):+.3f} ms of API server CPU per request (medians)")
PY
