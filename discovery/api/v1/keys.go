package discoveryv1

// Resource key prefixes of a snapshot's resources (Resource.key): the rest of a key is the
// payload's name, or for a RouteSet its listener, virtual host and hostname (see
// discovery/routeset). These constants are their only definition.
const (
	ListenerKeyPrefix    = "listener/"
	RouteSetKeyPrefix    = "routes/"
	ClusterKeyPrefix     = "cluster/"
	CertificateKeyPrefix = "certificate/"
)
