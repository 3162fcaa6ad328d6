// Package cluster brings up a single-node Kubernetes cluster from real parts, for tests and
// for people (make cluster-up): etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// containerd with runc and the bridge/host-local/loopback/portmap CNI plugins, the kubelet,
// kube-proxy in iptables mode and CoreDNS as the cluster DNS, all inside one network
// namespace of its own, so that no node, pod or Service address ever appears on the machine's
// interfaces and no packet leaves the machine. Nothing is pulled: the images the cluster
// needs (pause, CoreDNS, a busybox for tests) are built here and imported into containerd.
//
// Up brings it up, Down takes it down completely (processes, containers, mounts, the network
// namespace, cgroups, files); Load finds a cluster that another process brought up. Clients
// in this process reach the cluster through Cluster.Dialer (client-go through RESTConfig);
// kubectl runs inside the namespace (Cluster.Kubectl, or `ip netns exec NAME kubectl`).
package cluster
