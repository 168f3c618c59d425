// Package kubelet is the process kubelet of the local cluster provider (DESIGN.md test tier 5,
// conformance/cluster/local): a narrow stand-in for the real kubelet that registers one Node and
// runs the Pods bound to it as local processes on loopback pod IPs. It lets Deployments,
// ReplicaSets, the scheduler and EndpointSlices work for real on a machine without a container
// engine or privileges. docs/kubelet.md describes it for users.
//
// What it does:
//   - Registers a Ready Node whose spec.podCIDR is a range of addresses local to this machine
//     (default 198.18.0.0/24, made local by the provider with a local route on lo; a loopback
//     range such as 127.1.0.0/24 needs no privileges, but the API server refuses loopback
//     addresses in EndpointSlices) and renews its Lease in kube-node-lease (so the node
//     lifecycle controller keeps it Ready).
//   - Runs each container of a Pod bound to the node whose image it knows (Config.Images maps an
//     image to a local binary; see MatchImage) as a process in its own process group; command[0]
//     (the image's entrypoint) is replaced by the binary, command[1:] and args follow, with
//     $(VAR) references expanded as Kubernetes does.
//   - Gives every Pod its own IP from the pod CIDR (198.18.0.1, 198.18.0.2, ...), so processes of
//     different Pods can listen on the same port as long as they bind their Pod IP
//     (env POD_IP). Processes that bind all interfaces collide: Pods share the host's network
//     namespace.
//   - Environment: the container's env and envFrom (values, ConfigMap and Secret keys, the
//     downward API fields metadata.name, metadata.namespace, metadata.uid, spec.nodeName,
//     spec.serviceAccountName, status.podIP, status.hostIP), plus KUBERNETES_SERVICE_HOST/PORT
//     and KUBECONFIG (an admin kubeconfig in place of a service-account token).
//   - ConfigMap, Secret and emptyDir volumes are materialised per Pod under Config.StateDir; every
//     occurrence of a mount path in command, args, env values and workingDir is rewritten to the
//     local copy. ConfigMap updates after the Pod started are not propagated.
//   - Probes (httpGet, grpc, tcpSocket) run against the Pod IP with the probe's timing fields,
//     as the kubelet's prober workers do: the startup probe alone first (containerStatuses[]
//     .started stays false and neither readiness nor liveness runs until it succeeds;
//     failureThreshold failures kill the container); then readiness, whose results drive the
//     ContainersReady and Ready conditions and containerStatuses[].ready, and liveness, whose
//     failureThreshold consecutive failures kill the container (SIGTERM, SIGKILL after the
//     probe's or the Pod's grace period; Unhealthy and Killing events), after which the restart
//     policy applies and restartCount counts it. Exec probes fail with a message saying they are
//     unsupported.
//   - Port-forwarding: an HTTPS kubelet endpoint on NodeIP (Config.ServerPort, published as the
//     node's daemonEndpoints.kubeletEndpoint) serves /portForward/{ns}/{pod} (SPDY
//     portforward.k8s.io), so the API server's pods/portforward (kubectl port-forward, client-go
//     tools/portforward) reaches the Pods. The node publishes only its InternalIP address.
//   - Deletion: SIGTERM to each container's process group, SIGKILL after the grace period, then
//     the final delete of the Pod object (grace period 0, UID precondition).
//   - restartPolicy Always/OnFailure restarts exited containers with a back-off (1 s doubling
//     to 20 s) and counts restarts; Never leaves the Pod Succeeded or Failed.
//   - An image it does not know, an unsupported volume or env source: the container waits with
//     reason ErrImageNotMapped or CreateContainerConfigError and a message naming the problem,
//     the Pod stays Pending with Ready=False, and a Warning event is written. It never hangs.
//
// What it does not do: proxy Services (there is no kube-proxy: clients resolve EndpointSlices
// to Pod IPs themselves), serve the rest of the kubelet API (no kubectl logs/exec: logs are files
// under StateDir/pods/), pull images, enforce resources, run init containers or lifecycle hooks.
package kubelet
