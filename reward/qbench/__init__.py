"""The Q-Bench+ harness: A1 perception (questions, lettered answers), A2 description (judged), A3 leaderboard."""
