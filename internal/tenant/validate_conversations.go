package tenant

func (c *checker) conversations(s *Settings) {
	switch s.Conversations.Access {
	case "session":
	case "signed_in":
		if !s.Auth.Issuer || s.Auth.Disabled {
			c.Add("conversations.access", "signed_in needs an issuer with sign-in on (spec 3.2)")
		}
	default:
		c.Add("conversations.access", "must be session or signed_in")
	}
	cv := &s.Conversations
	if cv.AgentWebhook != "" {
		if len(cv.AgentWebhook) > maxWebhookURL {
			c.Add("conversations.agent_webhook", "must be at most %d characters", maxWebhookURL)
		} else {
			c.outboundURL("conversations.agent_webhook", cv.AgentWebhook)
		}
	}
	c.Text("conversations.handoff_unavailable_message", cv.HandoffUnavailableMessage, false, maxDescription, true)
	for _, l := range []struct {
		field     string
		n, lo, hi int
		unit      string
	}{
		{"conversations.handoff_timeout_seconds", cv.HandoffTimeoutSeconds, 10, 86400, "seconds"},
		{"conversations.idle_close_seconds", cv.IdleCloseSeconds, 60, 365 * 86400, "seconds"},
		{"conversations.retention_days", cv.RetentionDays, 1, 3650, "days"},
	} {
		if l.n != 0 && (l.n < l.lo || l.n > l.hi) {
			c.Add(l.field, "must be 0 (the default) or from %d to %d %s", l.lo, l.hi, l.unit)
		}
	}
}

// maxWebhookURL bounds conversations.agent_webhook.
const maxWebhookURL = 2048
