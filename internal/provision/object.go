package provision

import "sigs.k8s.io/controller-runtime/pkg/client"

// Object is a rendered object with its TypeMeta set, ready for server-side apply.
type Object = client.Object
