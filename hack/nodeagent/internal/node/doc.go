// Package node keeps the agent's Node object alive: it registers the Node with its capacity,
// addresses and Ready condition, renews its Lease in kube-node-lease and refreshes its
// conditions, as a kubelet's heartbeat does.
package node
