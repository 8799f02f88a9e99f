// Package volume materialises a pod's volumes as directories under the pod's directory:
// emptyDir, Secret, ConfigMap, downward API and projected volumes (ServiceAccount tokens bound
// to the pod included), written atomically the kubelet's way (a ..data link swapped to a new
// timestamped directory) and refreshed while the pod runs. The sandbox bind-mounts them.
package volume
