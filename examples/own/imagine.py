r"""Actor and critic trained in imagination, through a learned latent dynamics model (the behaviour-learning half of a
Dreamer-style agent): a training script written apart from the examples' shared loop (examples/training.py), as a
user's own script is, that takes the flags `scripts/whatif_truth.py --script` runs its variants with (--device,
--steps, --batch-size, --optim loop|foreach, --amp, --checkpoint, --compile).

    OMP_NUM_THREADS=1 python scripts/whatif_truth.py --device cpu --script examples/own/imagine.py \
        --script-args "--batch-size 32" --checkpoint-layers '^Dynamics$' --whatifs compile --rounds 3

Each step starts a batch of latent states, then imagines --horizon steps ahead: the actor picks an action from the
latent (straight-through Gumbel one-hot), the dynamics model (a GRU cell over the latent and action) moves the latent
and predicts the reward, the critic values it. The actor is trained on lambda-returns through the imagined
trajectory, the critic on those returns held fixed; Adam over all three modules, gradients clipped by their global
norm. The three modules are called once per imagined step each, so with --compile each is compiled on its own (the
modules called in the Python loop are what a user compiles); --checkpoint recomputes each dynamics step in backward.
On the CPU only (--device is taken and ignored).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Dynamics(nn.Module):
    def __init__(self, latent, actions, hidden):
        super().__init__()
        self.inp = nn.Linear(latent + actions, hidden)
        self.cell = nn.GRUCell(hidden, latent)
        self.reward = nn.Sequential(nn.Linear(latent, hidden), nn.ELU(), nn.Linear(hidden, 1))

    def forward(self, z, a):
        z = self.cell(F.elu(self.inp(torch.cat([z, a], -1))), z)
        return z, self.reward(z).squeeze(-1)


def mlp(sizes):
    layers = []
    for cin, cout in zip(sizes, sizes[1:-1]):
        layers += [nn.Linear(cin, cout), nn.LayerNorm(cout), nn.ELU()]
    return nn.Sequential(*layers, nn.Linear(sizes[-2], sizes[-1]))


class Actor(nn.Module):
    def __init__(self, latent, actions, hidden):
        super().__init__()
        self.net = mlp([latent, hidden, hidden, actions])

    def forward(self, z):
        return self.net(z)


class Critic(nn.Module):
    def __init__(self, latent, hidden):
        super().__init__()
        self.net = mlp([latent, hidden, hidden, 1])

    def forward(self, z):
        return self.net(z).squeeze(-1)


def lambda_returns(rewards, values, last, gamma=0.99, lam=0.95):
    out, ret = [], last
    for r, v in zip(reversed(rewards), reversed(values)):
        ret = r + gamma * ((1 - lam) * v + lam * ret)
        out.append(ret)
    return torch.stack(out[::-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--horizon", type=int, default=15)
    p.add_argument("--latent", type=int, default=128)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--actions", type=int, default=6)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--optim", default="default")
    p.add_argument("--amp", nargs="?", const="bf16", default=None)
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dynamics, actor, critic = Dynamics(a.latent, a.actions, a.hidden), Actor(a.latent, a.actions, a.hidden), \
        Critic(a.latent, a.hidden)
    params = [*dynamics.parameters(), *actor.parameters(), *critic.parameters()]
    kw = {"loop": {"foreach": False}, "foreach": {"foreach": True}}.get(a.optim, {})
    opt = torch.optim.Adam(params, lr=3e-4, eps=1e-5, **kw)
    step_dynamics, step_actor, step_critic = ((torch.compile(m) for m in (dynamics, actor, critic)) if a.compile
                                              else (dynamics, actor, critic))
    starts = torch.randn(a.batch_size, a.latent)
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp is not None):
            z, rewards, values, entropies = starts, [], [], []
            for _ in range(a.horizon):
                logits = step_actor(z).float()
                action = F.gumbel_softmax(logits, hard=True)
                entropies.append(torch.distributions.Categorical(logits=logits).entropy())
                values.append(step_critic(z).float())
                if a.checkpoint:
                    z, reward = checkpoint(step_dynamics, z, action, use_reentrant=False)
                else:
                    z, reward = step_dynamics(z, action)
                rewards.append(reward.float())
            last = step_critic(z).float()
            returns = lambda_returns(rewards, values, last)
            values = torch.stack(values)
            actor_loss = -returns.mean() - 1e-3 * torch.stack(entropies).mean()
            critic_loss = 0.5 * (values - returns.detach()).pow(2).mean()
            loss = actor_loss + critic_loss
        loss.backward()
        nn.utils.clip_grad_norm_(params, 100.0)
        opt.step()


if __name__ == "__main__":
    main()
