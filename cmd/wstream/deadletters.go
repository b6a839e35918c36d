package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/wstream/wstream/job"
)

// checkGuestErrorFlags checks --on-guest-error and --max-dead-letters
// before anything runs.
func checkGuestErrorFlags(c *cli.Context) error {
	if c.IsSet("on-guest-error") {
		if _, err := job.ParseOnGuestError(c.String("on-guest-error")); err != nil {
			return fmt.Errorf("--on-guest-error %w", err)
		}
	}
	if c.IsSet("max-dead-letters") {
		if _, _, err := job.ParseDeadLetterBudget(c.String("max-dead-letters")); err != nil {
			return fmt.Errorf("--max-dead-letters %w", err)
		}
	}
	return nil
}

// applyGuestErrorFlags writes --on-guest-error and --max-dead-letters into
// the plan (checkGuestErrorFlags checked them); validation then checks
// them with the rest of the plan.
func applyGuestErrorFlags(c *cli.Context, p *job.Plan) {
	g := p.OnGuestError
	if c.IsSet("on-guest-error") {
		parsed, _ := job.ParseOnGuestError(c.String("on-guest-error"))
		if g != nil && parsed.Sink == nil && parsed.Policy == g.Policy {
			parsed.Sink = g.Sink // the plan's sink stays unless the flag names one
		}
		if g != nil {
			parsed.MaxDeadLetters, parsed.BudgetPer = g.MaxDeadLetters, g.BudgetPer
		}
		g = parsed
	}
	if c.IsSet("max-dead-letters") {
		if g == nil {
			g = &job.GuestErrorSettings{Policy: job.OnGuestErrorFail}
		}
		g.MaxDeadLetters, g.BudgetPer, _ = job.ParseDeadLetterBudget(c.String("max-dead-letters"))
	}
	p.OnGuestError = g
}
