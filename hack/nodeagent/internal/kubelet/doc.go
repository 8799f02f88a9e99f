// Package kubelet serves the part of the kubelet API the API server calls on a node: container
// logs (pods/log) and a health check, over HTTPS on the node's address and port 10250. Clients
// prove themselves with a certificate of the cluster CA and are authorised by a
// SubjectAccessReview on the Node's proxy subresource, as the kubelet's webhook mode does.
package kubelet
