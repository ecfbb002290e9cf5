package tenant

// Organization says who the Company is (spec 3.1).
type Organization struct {
	Name    string `json:"name"`
	Domain  string `json:"domain"`
	LogoURI string `json:"logo_uri,omitempty"`
}
