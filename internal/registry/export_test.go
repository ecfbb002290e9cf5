package registry

// RegisterAPI and RegisterTool hold the registration rules: the tests
// drive them as tables, as the handler calls them once a body is decoded.
var (
	RegisterAPI  = (*Handler).registerAPI
	RegisterTool = (*Handler).registerTool
)

// OrdersYAML is a description of the tests, a seed of the fuzz targets.
const OrdersYAML = ordersYAML
