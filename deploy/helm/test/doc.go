// Package test checks the poppyhost Helm chart (deploy/helm/poppyhost): it
// lints it, renders it with Helm's Go SDK for each TLS mode and option, and
// decodes every manifest strictly into Kubernetes API types. It is its own
// module so the main module does not depend on Helm and Kubernetes.
package test
