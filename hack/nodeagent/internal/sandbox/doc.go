// Package sandbox gives each pod its own network namespace on the node's bridge and runs each
// container as a process inside it: chrooted into the pod's directory, in a mount namespace of
// its own where the pod's volumes are bind-mounted at their mount paths. Everything happens
// inside the user and network namespace the agent was started in; nothing touches the host's
// network. The agent's own binary is the pause process and the container init (see Main).
package sandbox
