"""Reinforcement learning: advantage actor-critic (A2C) on a vectorized cart-pole written in torch.

    python examples/suite/a2c.py --steps 20
    daydream trace examples/suite/a2c.py -- --steps 20

--batch-size environments run in lockstep (the classic cart-pole dynamics, Euler steps of
20 ms, reset when the pole falls or the cart leaves the track). Each training step rolls
the policy out for --rollout steps, computes n-step returns bootstrapped from the critic,
and takes A2C's loss: policy gradient with the advantage, value regression, an entropy
bonus. Flags of the shared loop: examples/training.py.
"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # examples/training.py
import training  # noqa: E402

GRAVITY, CART, POLE, LENGTH, FORCE, DT = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02


class CartPoles:
    """`n` cart-poles stepped together; state (x, x', theta, theta')."""

    def __init__(self, n: int, device: str) -> None:
        self.state = (torch.rand(n, 4, device=device) - 0.5) * 0.1

    def step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, velocity, theta, spin = self.state.unbind(1)
        force = (action.float() * 2 - 1) * FORCE
        cos, sin = torch.cos(theta), torch.sin(theta)
        temp = (force + POLE * LENGTH * spin**2 * sin) / (CART + POLE)
        angular = (GRAVITY * sin - cos * temp) / (LENGTH * (4 / 3 - POLE * cos**2 / (CART + POLE)))
        linear = temp - POLE * LENGTH * angular * cos / (CART + POLE)
        self.state = torch.stack([x + DT * velocity, velocity + DT * linear, theta + DT * spin, spin + DT * angular], 1)
        done = (self.state[:, 0].abs() > 2.4) | (self.state[:, 2].abs() > 0.21)
        fresh = (torch.rand_like(self.state) - 0.5) * 0.1
        self.state = torch.where(done[:, None], fresh, self.state)
        return self.state, torch.ones_like(force), done.float()


class ActorCritic(nn.Module):
    def __init__(self, hidden: int, layers: int, checkpoint: bool = False) -> None:
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(4, hidden), nn.Tanh())
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) for _ in range(layers))
        self.policy = nn.Linear(hidden, 2)
        self.value = nn.Sequential(nn.Linear(hidden, 1), nn.Flatten(0))
        self.checkpoint = checkpoint

    def forward(self, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = training.through(self.blocks, self.embed(state), self.checkpoint)
        return self.policy(x), self.value(x)


def main() -> None:
    parser = training.options(__doc__.splitlines()[0], batch_size=64)
    parser.add_argument("--rollout", type=int, default=16, help="environment steps per training step")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--gamma", type=float, default=0.99)
    args = parser.parse_args()
    if args.cuda_graphs:
        raise SystemExit("a2c: --cuda-graphs is not supported here (the rollout samples actions on the host's schedule)")
    device, _ = training.setup(args)
    model = training.wrap(ActorCritic(args.hidden, args.layers, checkpoint=args.checkpoint).to(device), args)
    optimizer = training.optimizer(torch.optim.RMSprop, model, args, lr=7e-4, alpha=0.99, eps=1e-5)
    environments = CartPoles(args.batch_size, device)

    def loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        log_probs, values, entropies, rewards, dones = [], [], [], [], []
        state = environments.state
        for _ in range(args.rollout):
            logits, value = model(state)
            distribution = torch.distributions.Categorical(logits=logits.float())
            action = distribution.sample()
            state, reward, done = environments.step(action)
            log_probs.append(distribution.log_prob(action))
            entropies.append(distribution.entropy())
            values.append(value.float())
            rewards.append(reward)
            dones.append(done)
        with torch.no_grad():
            ret = model(state)[1].float()
            returns = []
            for reward, done in zip(reversed(rewards), reversed(dones)):
                ret = reward + args.gamma * ret * (1 - done)
                returns.append(ret)
            returns = torch.stack(returns[::-1])
        values_t, advantage = torch.stack(values), returns - torch.stack(values).detach()
        policy_loss = -(torch.stack(log_probs) * advantage).mean()
        return policy_loss + 0.5 * (returns - values_t).pow(2).mean() - 0.01 * torch.stack(entropies).mean()

    training.train(model, lambda step: (), loss, optimizer, args, device)


if __name__ == "__main__":
    main()
