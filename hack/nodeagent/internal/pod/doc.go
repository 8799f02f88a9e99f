// Package pod is the agent's kubelet loop: it binds unscheduled pods to its node, and for each
// pod on the node runs a worker that starts the sandbox, serves the volumes, runs the init
// containers and then the containers as supervised processes (restarts with backoff,
// readiness and liveness probes), writes the pod's status, and on deletion stops the
// processes (SIGTERM, then SIGKILL after the grace period) and deletes the pod for good.
package pod
