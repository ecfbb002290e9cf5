// Package crosstenant holds tests only: the cross-tenant suite. For every
// store, data made as one Company (A) is read, changed, approved,
// resolved, ended, revoked and deleted as another (B); each attempt must
// fail (not found, nothing affected, refused) and leave A's data as it
// was, checked afterwards as A. It is the suite of issue 17, in the shape
// of ory/hydra's persistence/sql/persister_nid_test.go, and builds on
// internal/testkit/testdb and the stores' constructors only, never the
// platform.
//
// The package has no non-test code; crosstenant_test.go lists which
// store methods the suite covers and why the others cannot be.
package crosstenant
