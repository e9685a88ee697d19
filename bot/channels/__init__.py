"""Channels: digests posted to a team's chat room (Slack, Discord, Mattermost, Telegram,
Matrix), each part once.  A channel is a subscriber of another kind: every rule that
decides what a reader gets decides what a channel gets; only the last stage differs
(``delivering`` posts parts where ``bot.delivery`` sends mail)."""
