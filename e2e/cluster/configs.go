//go:build linux

package cluster

import (
	"fmt"
	"path/filepath"
	"strings"
)

// containerdConfig keeps every path of containerd under dir: its root, state, sockets, the
// runc state, the CNI configuration and the pods' network namespaces
// (netns_mounts_under_state_dir), so nothing of it lands in /var/lib or /run and Down finds
// all of it there.
func containerdConfig(dir, socket string) string {
	d := filepath.Join(dir, "containerd")
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  tolerate_missing_hugetlb_controller = true
  # No process here may lower its OOM score (CAP_SYS_RESOURCE is outside the bounding set):
  # containers get containerd's own score at least, not the kubelet's -997/-998 for critical
  # pods and sandboxes.
  restrict_oom_score_adj = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[7]q

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
    max_conf_num = 1
`, filepath.Join(d, "root"), filepath.Join(d, "state"), socket, socket+".ttrpc", filepath.Join(d, "opt"),
		PauseImage, filepath.Join(d, "runc"), cniBinDir, filepath.Join(dir, "cni", "net.d"))
}

// kubeletConfig: the cgroupfs driver and the cgroup v1 allowance this machine needs (v1
// hierarchy), the pods' cgroups under cgroupRoot, eviction thresholds low enough that a
// busy disk does not taint the node, no image garbage collection (the images cannot be pulled
// again), and the cluster DNS.
func kubeletConfig(dir, socket, cgroupRoot string) string {
	d := filepath.Join(dir, "kubelet")
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: %[1]s
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
clusterDomain: cluster.local
clusterDNS: [%[4]s]
resolvConf: %[5]s
podLogsDir: %[6]s
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[7]s
authorization:
  mode: Webhook
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, cgroupRoot, socket, NodeIP, DNSServiceIP, filepath.Join(d, "resolv.conf"), filepath.Join(d, "pod-logs"),
		filepath.Join(dir, "pki", "ca.crt"))
}

// kubeProxyConfig: iptables mode in the namespace; it leaves the conntrack sysctls alone
// (maxPerCore 0 and zero timeouts), which are not its to set in a namespace of a shared
// machine.
func kubeProxyConfig(dir string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
clusterCIDR: %[3]s
bindAddress: %[4]s
healthzBindAddress: %[4]s:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, filepath.Join(dir, "kube-proxy.kubeconfig"), NodeName, PodCIDR, NodeIP)
}

// cniConfig: a bridge with host-local addresses from PodCIDR (leases kept under dir), and
// portmap for hostPort. No ipMasq: pods talk only to addresses in the namespace.
func cniConfig(network, dir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %[1]q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %[2]q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %[3]q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, network, PodCIDR, filepath.Join(dir, "cni", "networks"))
}

// coreDNSManifest is CoreDNS as the cluster DNS: a Deployment in kube-system behind the
// kube-dns Service at DNSServiceIP, serving cluster.local from the API (kubernetes plugin).
// It forwards nothing: the cluster reaches no other DNS server.
func coreDNSManifest() string {
	return strings.NewReplacer("@IMAGE@", CoreDNSImage, "@DNS_IP@", DNSServiceIP).Replace(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- kind: ServiceAccount
  name: coredns
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
        }
        cache 30
        loop
        loadbalance
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 1
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      containers:
      - name: coredns
        image: @IMAGE@
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
          periodSeconds: 2
        livenessProbe:
          httpGet: {path: /health, port: 8080}
          periodSeconds: 10
        resources:
          requests: {cpu: 50m, memory: 30Mi}
          limits: {memory: 170Mi}
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
      volumes:
      - name: config
        configMap:
          name: coredns
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  clusterIP: @DNS_IP@
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
`)
}
