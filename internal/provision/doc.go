// Package provision renders the objects of a Gateway's dedicated proxy (GEP-1762): its
// ServiceAccount, Deployment, Service and, above one replica, PodDisruptionBudget. The Desired
// builders are pure: they take a Model built from the graph and the Gateway's parameters and
// never call the API server; controllers/provision_controller.go applies what they return.
package provision
