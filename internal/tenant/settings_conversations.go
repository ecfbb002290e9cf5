package tenant

// Conversations configures the Company Agent's conversation endpoint.
type Conversations struct {
	Enabled bool `json:"enabled"`
	// Access is the agent.protocols access hint: session or signed_in.
	Access string `json:"access"`
	// AgentWebhook is the Company Agent's https URL: new Personal Agent
	// messages and other changes are POSTed there. Without one, nobody
	// prepares replies automatically and conversations wait idle for the
	// Company's staff.
	AgentWebhook string `json:"agent_webhook,omitempty"`
	// HandoffTimeoutSeconds: a handoff nobody answers in this time goes
	// back to idle with HandoffUnavailableMessage [300].
	HandoffTimeoutSeconds     int    `json:"handoff_timeout_seconds"`
	HandoffUnavailableMessage string `json:"handoff_unavailable_message,omitempty"`
	// IdleCloseSeconds closes conversations without activity for this
	// long [7 days].
	IdleCloseSeconds int `json:"idle_close_seconds"`
	// RetentionDays keeps events this long after they were added, then
	// prunes them [90].
	RetentionDays int `json:"retention_days"`
}
