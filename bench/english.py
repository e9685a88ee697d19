"""Words of English research fields for bench/rank.py --embeddings: a topic is a field's
own words, an abstract mostly the words every field uses, so that an embedding model
(which knows what words mean) and TF-IDF (which counts them) rank the same papers.  The
default corpus of made-up syllables means nothing to an embedding model."""

from __future__ import annotations

TOPICS = [
    "neuron spiking synapse cortex dendrite axon plasticity membrane firing neuromorphic hippocampus "
    "potential excitatory inhibitory brain neural stimulus electrode spike thalamus retina",
    "galaxy star planet orbit telescope cosmic supernova redshift nebula stellar quasar gravitational "
    "exoplanet luminosity comet asteroid solar cosmology pulsar dwarf",
    "protein enzyme peptide amino folding receptor ligand binding molecular residue kinase antibody "
    "membrane substrate catalytic domain structure crystal helix sequence",
    "climate rainfall temperature ocean atmosphere carbon glacier drought warming precipitation monsoon "
    "emissions weather humidity ice aerosol sea storm wind forecast",
    "compiler parser syntax bytecode interpreter optimization register loop inline type semantic "
    "grammar lexer assembly runtime garbage code instruction frontend backend",
    "database query index transaction relational schema table join storage sql replication shard "
    "consistency commit key column row cache btree log",
    "robot gripper manipulation locomotion actuator arm grasp motor legged navigation servo drone "
    "torque kinematics vehicle autonomous lidar mobile wheel joint",
    "market price stock trade inflation interest bank currency investor portfolio monetary asset "
    "credit debt wage bond tax fiscal economy equity",
    "cancer tumor patient clinical therapy chemotherapy oncology metastasis biopsy survival dose "
    "radiation diagnosis lesion malignant carcinoma trial screening hospital treatment",
    "crop soil plant seed harvest farm irrigation yield wheat maize fertilizer pest root leaf "
    "agriculture grain livestock greenhouse nitrogen field",
    "quantum qubit entanglement superposition photon decoherence gate spin interference tunneling "
    "superconducting fidelity measurement hamiltonian circuit annealing error teleportation cavity lattice",
    "speech audio voice acoustic phoneme microphone pitch sound speaker spectrogram music listener "
    "noise hearing pronunciation accent tone recording vocal transcription",
    "encryption cipher key attack password malware authentication signature vulnerability exploit "
    "firewall privacy hash certificate intrusion phishing adversary secure threat breach",
    "battery electrode lithium cathode anode electrolyte charge voltage capacity cell energy "
    "storage solid ion graphite discharge fuel hydrogen catalyst current",
    "bird species habitat forest predator prey ecosystem biodiversity insect population migration "
    "wildlife conservation nest mammal extinction pollination reef fish evolution",
    "student teacher school classroom curriculum learning education exam lesson university reading "
    "homework literacy tutoring grade course pupil campus lecture skill",
]

COMMON = (
    "we propose method approach results show data model analysis study paper present new based "
    "using performance experiments evaluate framework system proposed significant improve novel "
    "demonstrate effective several different large small high low time set number problem first "
    "two three also however across compared existing recent previous work provide further develop "
    "important various general specific strong simple main key process result effect use case "
    "important current future better higher lower across within between among under over each "
    "both many most more less often well can may will our their this these those such other"
).split()


def topic_words() -> list[list[str]]:
    return [topic.split() for topic in TOPICS]
