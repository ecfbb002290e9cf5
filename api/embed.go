package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of every route poppyhost serves.
//
//go:embed openapi.yaml
var OpenAPI []byte
