// Package sandbox gives each pod its own network namespace on the node's bridge and runs each
// container as a process inside it: chrooted into its root (the pod's directory for a mapped
// binary, a copy of its image's root filesystem otherwise), in a mount namespace of its own
// where the pod's volumes are bind-mounted at their mount paths and the root is read-only when
// readOnlyRootFilesystem says so, with the pod's safe sysctls written in its network namespace,
// as its user. Everything happens inside the user and network namespace the agent was started
// in; nothing touches the host's network. The agent's own binary is the pause process and the
// container init (see Main).
package sandbox
