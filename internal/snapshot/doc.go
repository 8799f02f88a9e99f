// Package snapshot is the third stage of the translation pipeline: Compile turns a graph.Graph
// into one Snapshot per proxy scope (each dedicated Gateway, and the shared pool). A Snapshot is
// the intermediate representation the proxy evaluates: listeners keyed by Gateway and port,
// virtual hosts per listener hostname, routes in first-match precedence order, and clusters.
package snapshot
