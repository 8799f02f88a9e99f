// Package state holds ClusterState, the input of the translation pipeline: typed maps of the
// watched Kubernetes objects, keyed by namespace/name. The controller fills it from its informer
// cache; tests fill it from multi-document YAML with Decode. Nothing here talks to the API server.
package state
